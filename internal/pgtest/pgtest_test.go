package pgtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestServerLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after NewDatabase's cleanup has dropped the database.
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("server directory %s still exists after Close (stat: %v)", s.dir, err)
		}
	})

	dsn := s.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dsn, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE beats (bot text PRIMARY KEY, n int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO beats VALUES ('a', 1), ('b', 2)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	// Down: connections are refused; up again: the same port serves the same data.
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		_ = c.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("reconnecting after resume: %v", err)
	}
	var sum int
	if err := conn.QueryRow(ctx, "SELECT sum(n) FROM beats").Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 3 {
		t.Fatalf("sum after restart = %d, want 3 (rows acknowledged before the restart were lost)", sum)
	}
	_ = conn.Close(ctx)

	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("reconnecting after restart: %v", err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
}

func TestFindBinDir(t *testing.T) {
	root := t.TempDir()
	mk := func(dir string, programs ...string) string {
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range programs {
			if err := os.WriteFile(filepath.Join(d, p), []byte("#!/bin/true\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	v13 := mk("lib/13/bin", "initdb", "pg_ctl")
	v15 := mk("lib/15/bin", "initdb", "pg_ctl")
	mk("lib/17/bin", "pg_ctl") // incomplete: no initdb
	onPath := mk("path", "initdb", "pg_ctl")
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	withPath := func(string) (string, error) { return filepath.Join(onPath, "pg_ctl"), nil }

	tests := []struct {
		name     string
		globs    []string
		lookPath func(string) (string, error)
		want     string
		wantErr  string
	}{
		{"newest complete version wins", []string{filepath.Join(root, "lib/*/bin")}, withPath, v15, ""},
		{"only an old version", []string{v13}, noPath, v13, ""},
		{"falls back to PATH", []string{filepath.Join(root, "none/*/bin")}, withPath, onPath, ""},
		{"nothing installed", nil, noPath, "", "apt-get install -y postgresql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findBinDir(tt.globs, tt.lookPath)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("findBinDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
