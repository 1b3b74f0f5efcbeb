package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/pgtest"
)

// stack is everything the demo started, stopped in reverse order by close: the operator
// before the API server it talks to, Postgres and the simulator last.
type stack struct {
	dir        string
	kubeconfig string
	scheme     *k8sruntime.Scheme
	cfg        *rest.Config
	client     client.Client
	env        *envtest.Environment
	pg         *pgtest.Server
	manager    *exec.Cmd
	managerLog string
	exited     chan struct{} // closed when the manager process ended
	closers    []func() error
}

// defer registers a cleanup step; close runs them last first.
func (s *stack) deferClose(f func() error) { s.closers = append(s.closers, f) }

func (s *stack) close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// crdDir finds config/crd/bases: from the working directory (make demo runs at the
// repository root), else next to this source file (go test runs in cmd/demo).
func crdDir() string {
	const rel = "config/crd/bases"
	if fi, err := os.Stat(rel); err == nil && fi.IsDir() {
		return rel
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", rel)
}

// startControlPlane runs kube-apiserver and etcd from KUBEBUILDER_ASSETS with the CRDs
// installed, and writes an admin kubeconfig into the demo directory.
func (s *stack) startControlPlane(assets string) error {
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return fmt.Errorf("KUBEBUILDER_ASSETS=%q has no %s: run `make demo` (it builds them) or export KUBEBUILDER_ASSETS=$(hack/envtest.sh): %w", assets, bin, err)
		}
	}
	s.scheme = k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s.scheme))
	utilruntime.Must(v1.AddToScheme(s.scheme))
	s.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crdDir()},
		ErrorIfCRDPathMissing: true,
		Scheme:                s.scheme,
	}
	cfg, err := s.env.Start()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	s.deferClose(func() error {
		if err := s.env.Stop(); err != nil {
			return fmt.Errorf("stopping the control plane: %w", err)
		}
		return nil
	})
	cfg.QPS, cfg.Burst = 200, 400
	s.cfg = cfg
	if s.client, err = client.New(cfg, client.Options{Scheme: s.scheme}); err != nil {
		return err
	}
	s.kubeconfig = filepath.Join(s.dir, "kubeconfig")
	return os.WriteFile(s.kubeconfig, s.env.KubeConfig, 0o600)
}

// startPostgres runs a throwaway Postgres for the operator's store.
func (s *stack) startPostgres(ctx context.Context) (dsn string, err error) {
	if s.pg, err = pgtest.Start(ctx); err != nil {
		return "", fmt.Errorf("starting Postgres: %w", err)
	}
	s.deferClose(s.pg.Close)
	return s.pg.DSN("postgres"), nil
}

// managerPorts are the local addresses the operator listens on.
type managerPorts struct {
	botAPI, metrics, probes string
}

func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// loopbackCIDRs are this machine's loopback addresses, which the operator's egress policy
// refuses by default.
const loopbackCIDRs = "127.0.0.0/8,::1/128"

// managerArgs are the operator's flags in the demo. The simulated Coolify listens on loopback,
// which its egress policy refuses by default; so does a webhook receiver on this machine
// (--webhook-url), which Bot callbacks and webhooks may reach only with the demo's exception:
// one no production manager should have, as it lets whoever creates a Bot reach the manager's
// own host.
func managerArgs(p managerPorts, dsn string, o options) []string {
	args := []string{
		"--leader-elect=false",
		"--database-url=" + dsn,
		"--bot-api-bind-address=" + p.botAPI,
		"--bot-api-url=http://" + p.botAPI,
		"--metrics-bind-address=" + p.metrics,
		"--health-probe-bind-address=" + p.probes,
		"--schedule-lead=" + o.scheduleLead.String(),
		"--egress-allowed-cidrs=" + loopbackCIDRs,
	}
	if o.webhookURL != "" {
		args = append(args, "--callback-allowed-cidrs="+loopbackCIDRs)
	}
	return args
}

// startManager runs the real operator binary (o.manager) against the demo's control plane,
// its output in manager.log, and waits until it is ready.
func (s *stack) startManager(ctx context.Context, dsn string, o options) (managerPorts, error) {
	addrs, err := freeAddrs(3)
	if err != nil {
		return managerPorts{}, err
	}
	p := managerPorts{botAPI: addrs[0], metrics: addrs[1], probes: addrs[2]}
	s.managerLog = filepath.Join(s.dir, "manager.log")
	logFile, err := os.Create(s.managerLog)
	if err != nil {
		return p, err
	}
	// Stopping is cancelling runCtx: SIGTERM, as Kubernetes would send, and a kill if the
	// operator has not exited ten seconds later.
	runCtx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(runCtx, o.manager, managerArgs(p, dsn, o)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C in the terminal reaches the demo, which stops the
	// operator first, before the API server it talks to goes away.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		stop()
		_ = logFile.Close()
		return p, fmt.Errorf("starting the operator %s: %w", o.manager, err)
	}
	s.manager = cmd
	s.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(s.exited)
	}()
	s.deferClose(func() error {
		stop()
		<-s.exited
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return errors.New("the operator did not stop within 10s of SIGTERM; killed it")
		}
		return nil
	})
	if err := s.waitReady(ctx, "http://"+p.probes+"/readyz"); err != nil {
		return p, err
	}
	return p, nil
}

func (s *stack) waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("the operator exited during start-up; the end of %s:\n%s", s.managerLog, tail(s.managerLog, 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator was not ready within a minute; see %s", s.managerLog)
		}
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pid is the operator's process id, printed so a person (or the test) can check it is gone.
func (s *stack) pid() string {
	if s.manager == nil || s.manager.Process == nil {
		return "-"
	}
	return strconv.Itoa(s.manager.Process.Pid)
}
