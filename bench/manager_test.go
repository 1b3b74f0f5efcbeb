package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// managerProcess is the manager binary running as a subprocess: its RSS is the operator's own,
// and its /metrics counts the API server requests it sent.
type managerProcess struct {
	cmd        *exec.Cmd
	logPath    string
	metricsURL string
	probeURL   string
	pprofAddr  string // empty when the binary was started without --pprof-bind-address
	done       chan struct{}
	waitErr    error
}

func startManagerProcess(binary, kubeconfig, dsn, logPath string, extra []string) (*managerProcess, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	metrics, probe, botAPI := addrs[0], addrs[1], addrs[2]
	args := append([]string{
		"--leader-elect=false",
		"--metrics-bind-address=" + metrics,
		"--health-probe-bind-address=" + probe,
		"--bot-api-bind-address=" + botAPI,
		"--bot-api-url=http://" + botAPI,
		"--database-url=" + dsn,
		"--coolify-rate-limit=1000000",
		// The simulated Coolify listens on loopback, which the egress policy refuses by default.
		"--egress-allowed-cidrs=127.0.0.0/8,::1/128",
	}, extra...)
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting the manager: %w", err)
	}
	m := &managerProcess{cmd: cmd, logPath: logPath, metricsURL: "http://" + metrics + "/metrics",
		probeURL: "http://" + probe + "/readyz", done: make(chan struct{})}
	for _, a := range extra {
		if v, ok := strings.CutPrefix(a, "--pprof-bind-address="); ok {
			m.pprofAddr = v
		}
	}
	go func() {
		m.waitErr = cmd.Wait()
		_ = log.Close()
		close(m.done)
	}()
	return m, nil
}

// waitReady waits for /readyz: the informers are synced and the controllers run.
func (m *managerProcess) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if m.exited() {
			return fmt.Errorf("the manager exited at start: %w", m.waitErr)
		}
		resp, err := http.Get(m.probeURL) //nolint:noctx // a loopback probe with a short loop
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager was not ready within %v (last: %w)", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (m *managerProcess) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// stop asks the manager to shut down (SIGTERM) and kills it if it has not within 30s.
func (m *managerProcess) stop() {
	if m.exited() {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// logTail is the end of the manager's log.
func (m *managerProcess) logTail() string {
	b, _ := os.ReadFile(m.logPath)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// memory reads the process's resident set now (VmRSS) and at its peak (VmHWM), in bytes.
func (m *managerProcess) memory() (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	return parseProcStatus(f)
}

// parseProcStatus reads VmRSS and VmHWM (reported in kB) from /proc/<pid>/status.
func parseProcStatus(r io.Reader) (rss, peak int64, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "VmRSS" && key != "VmHWM" {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("unexpected %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if rss == 0 || peak == 0 {
		return 0, 0, errors.New("no VmRSS or VmHWM in the process status")
	}
	return rss, peak, nil
}

// cpuTime reads the user and system CPU time of the process from /proc/<pid>/stat.
func (m *managerProcess) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux ABI Go
// supports.
const clockTicks = 100

// parseProcStat reads utime and stime (fields 14 and 15) of /proc/<pid>/stat. The command
// name (field 2) may hold spaces, so fields are counted after its closing parenthesis.
func parseProcStat(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/<pid>/stat")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 { // state is field 3, so utime (14) and stime (15) are f[11] and f[12]
		return 0, errors.New("short /proc/<pid>/stat")
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/<pid>/stat times: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// scrape reads the manager's Prometheus metrics.
func (m *managerProcess) scrape() (samples, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", m.metricsURL, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(body))
}

// saveMetrics writes the manager's raw /metrics to path, for reading beside a profile.
func (m *managerProcess) saveMetrics(path string) error {
	resp, err := http.Get(m.metricsURL) //nolint:noctx // loopback, diagnostics only
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// profile fetches a pprof profile (e.g. "profile?seconds=10", "heap") into path.
func (m *managerProcess) profile(what, path string, timeout time.Duration) error {
	if m.pprofAddr == "" {
		return errors.New("the manager serves no pprof")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.pprofAddr+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: %s", what, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}
