// Package typescript runs the tests of the TypeScript client of the bot API (this directory, an
// npm package) from `go test ./...`, so that `make test` runs them: npm ci when node_modules is
// missing or older than package-lock.json, the test server built here, then npm test, which
// lints the bot API's OpenAPI document (docs/botapi.openapi.yaml) before the tests.
package typescript

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// lockStamp, in node_modules, holds the SHA-256 of the package-lock.json it was installed from.
const lockStamp = "node_modules/.botpool-lock-sha256"

// TestTypeScriptClient builds the test server (./testserver: the real bot API on loopback) and
// runs npm test, whose tests drive the client against it. It skips only when node or npm is not
// on PATH.
func TestTypeScriptClient(t *testing.T) {
	npm := lookPath(t, "npm")
	node := lookPath(t, "node")
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH: the TypeScript client's tests build their test server with it: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	version := run(ctx, t, nil, node, "--version")
	m := regexp.MustCompile(`^v(\d+)\.(\d+)\.`).FindStringSubmatch(version)
	if m == nil {
		t.Fatalf("node --version said %q", version)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	// The client runs on Node 20; its tests also run @redocly/cli (the OpenAPI lint), which
	// supports 20.19 or later on 20, and 22.12 or later.
	if supported := major == 20 && minor >= 19 || major == 22 && minor >= 12 || major > 22; !supported {
		t.Fatalf("node %s does not run the TypeScript client's tests: they need Node 20.19 or later on 20, or 22.12 or later", version)
	}

	// npm's own chatter would only slow it down and clutter the log.
	env := append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	if have, err := os.ReadFile(lockStamp); err != nil || string(bytes.TrimSpace(have)) != want {
		start := time.Now()
		run(ctx, t, env, npm, "ci")
		if err := os.WriteFile(lockStamp, []byte(want+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("npm ci: %s", time.Since(start).Round(time.Millisecond))
	}

	server := filepath.Join(t.TempDir(), "testserver")
	run(ctx, t, nil, goCmd, "build", "-o", server, "./testserver")

	start := time.Now()
	out := run(ctx, t, append(env, "BOTPOOL_TESTSERVER="+server), npm, "test")
	t.Logf("npm test: %s\n%s", time.Since(start).Round(time.Millisecond), summary(out))
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not on PATH: skipping the TypeScript client's tests (clients/typescript), which need Node 20 or later and npm", name)
	}
	return p
}

// run runs a command in this directory, failing the test with its output when it fails.
func run(ctx context.Context, t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	if env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "CI=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
	return string(bytes.TrimSpace(out))
}

// summary is the test runner's closing counts (ℹ tests 74, ℹ pass 74…), or all of out when it
// has none.
func summary(out string) string {
	lines := regexp.MustCompile(`(?m)^ℹ .*$`).FindAllString(out, -1)
	if len(lines) == 0 {
		return out
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}
