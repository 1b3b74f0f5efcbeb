// Package pgtest runs a throwaway PostgreSQL server for tests: Debian's initdb and pg_ctl
// create a cluster in a temporary directory, listening on 127.0.0.1 and a free port, and Close
// removes every trace of it. PostgreSQL refuses to run as root, so when the tests run as root
// (as in CI) the server runs as the package's `postgres` user through runuser.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// installHint is what a person needs to read when the server binaries are missing.
const installHint = "install Debian's postgresql package (apt-get install -y postgresql), " +
	"or put a directory holding initdb and pg_ctl first on PATH"

// Server is a running throwaway PostgreSQL server.
type Server struct {
	binDir string
	dir    string // owns data/, the log and the Unix socket
	port   int
	runAs  *user.User // nil: run as the current user
	dbSeq  atomic.Int64
}

// Start creates a cluster in a new temporary directory and starts the server on a free port.
func Start(ctx context.Context) (*Server, error) {
	binDir, err := findBinDir(defaultBinDirGlobs, exec.LookPath)
	if err != nil {
		return nil, err
	}
	s := &Server{binDir: binDir}
	if os.Geteuid() == 0 {
		if s.runAs, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses root, but there is no 'postgres' user to run it as: %s: %w", installHint, err)
		}
	}
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, err
	}
	if err := s.chown(s.dir); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	if _, err := s.pg(ctx, "initdb", "-D", s.dataDir(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	// A free port can be taken by someone else between our probe and the server's bind;
	// try a few before giving up.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err == nil {
			if err = s.Resume(ctx); err == nil {
				return s, nil
			}
		}
		if attempt == 2 {
			_ = os.RemoveAll(s.dir)
			return nil, err
		}
	}
}

// StartT is Start for one test or benchmark: it fails tb when the server cannot start (within
// two minutes) and stops the server when tb ends.
func StartT(tb testing.TB) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// DSN returns a connection string for the database (e.g. "postgres").
func (s *Server) DSN(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, database)
}

// Port is the TCP port the server listens on (it keeps it across Stop and Resume).
func (s *Server) Port() int { return s.port }

// NewDatabase creates an empty database for one test and drops it when the test ends; tests
// sharing a server never see each other's tables.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), s.dbSeq.Add(1))
	if err := s.exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating database: %v", err)
	}
	t.Cleanup(func() {
		if err := s.exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, sql)
	return errors.Join(err, conn.Close(ctx))
}

// Stop shuts the server down cleanly, keeping its data: tests use it (with Resume) to check
// behaviour during an outage.
func (s *Server) Stop(ctx context.Context) error {
	_, err := s.pg(ctx, "pg_ctl", "-D", s.dataDir(), "-m", "fast", "-w", "stop")
	return err
}

// Resume starts the server again on the same port and data.
func (s *Server) Resume(ctx context.Context) error {
	opts := strings.Join([]string{
		"-c listen_addresses=127.0.0.1",
		"-c port=" + strconv.Itoa(s.port),
		"-c unix_socket_directories=" + s.dir,
		"-c max_connections=300",
		// Throwaway data: skip the fsyncs. A clean Stop still flushes every committed row,
		// so a restart loses nothing that was acknowledged.
		"-c fsync=off",
		"-c full_page_writes=off",
	}, " ")
	out, err := s.pg(ctx, "pg_ctl", "-D", s.dataDir(), "-l", s.logFile(), "-w", "-t", "60", "-o", opts, "start")
	if err != nil {
		return fmt.Errorf("%w\n%s\nserver log:\n%s", err, out, s.logTail())
	}
	return nil
}

// Restart stops and resumes the server.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(ctx); err != nil {
		return err
	}
	return s.Resume(ctx)
}

// Close stops the server at once and removes its directory.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stopErr := s.pg(ctx, "pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "stop")
	if _, err := os.Stat(filepath.Join(s.dataDir(), "postmaster.pid")); err != nil {
		stopErr = nil // not running (already stopped by Stop): nothing to report
	}
	return errors.Join(stopErr, os.RemoveAll(s.dir))
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logFile() string { return filepath.Join(s.dir, "server.log") }

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// pg runs one of the server's programs, as the postgres user when we are root.
func (s *Server) pg(ctx context.Context, program string, args ...string) (string, error) {
	path := filepath.Join(s.binDir, program)
	var cmd *exec.Cmd
	if s.runAs != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.runAs.Username, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = s.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", program, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (s *Server) chown(path string) error {
	if s.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(s.runAs.Uid)
	gid, _ := strconv.Atoi(s.runAs.Gid)
	return os.Chown(path, uid, gid)
}

// defaultBinDirGlobs are where Debian installs the server programs; its /usr/bin wrappers
// need a configured cluster, so the versioned directories come first.
var defaultBinDirGlobs = []string{"/usr/lib/postgresql/*/bin"}

// findBinDir returns a directory holding initdb and pg_ctl: the newest Debian version
// directory, else the one of pg_ctl on PATH.
func findBinDir(globs []string, lookPath func(string) (string, error)) (string, error) {
	var dirs []string
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		dirs = append(dirs, m...)
	}
	// Newest major version first: "/usr/lib/postgresql/17/bin" before ".../15/bin".
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	if p, err := lookPath("pg_ctl"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server programs (initdb, pg_ctl) not found: %s", installHint)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func freePort() (int, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}
