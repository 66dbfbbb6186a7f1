// Package servetest builds the idmint binary and runs `idmint serve` processes
// for the tests that need real processes (SIGKILL, SIGSTOP, restarts, a
// failover under load): the one copy of what those tests share.
//
//	bin := servetest.Build(t)
//	servetest.Run(t, bin, "migrate", "--database-url", dbURL)
//	p := &servetest.Process{Bin: bin, DatabaseURL: dbURL, Instance: "a"}
//	p.Start(t) // waits for /id/health; stopped (SIGKILL) when the test ends
//	resp, _ := http.Get(p.Base() + "/id?biz_tag=order")
//	p.Stop(t, syscall.SIGTERM)
package servetest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testutil"
)

// Build builds cmd/idmint into a temporary directory of tb's and returns
// the binary's path. It works from any directory of the module.
func Build(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "idmint")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/idmint/idmint/cmd/idmint").CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Run runs bin with args to its end and returns its stdout, trimmed; it
// fails tb with the stderr if the command fails.
func Run(tb testing.TB, bin string, args ...string) string {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("idmint %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// Process is one `idmint serve` on a loopback port. Set the fields, then
// Start it; Start again after a Stop restarts it on the same address and
// log file.
type Process struct {
	Bin         string   // the idmint binary (Build)
	DatabaseURL string   // --database-url
	Instance    string   // --instance
	Addr        string   // --listen; a free 127.0.0.1 port if empty
	LogPath     string   // stdout and stderr, appended; a file in a temp dir if empty
	Args        []string // more serve flags, after the others: they win
	Env         []string // more environment, after the test's own
	// Ready is the path probed until it answers; "/id/health" if empty,
	// "tcp" for a TCP connection (a TLS listener).
	Ready string
	// Cmd is the running (or last) process.
	Cmd *exec.Cmd
}

// Base is the process's URL, http://127.0.0.1:port.
func (p *Process) Base() string { return "http://" + p.Addr }

// Start starts the process and waits, at most 30 s, until it listens. The
// process is killed when the test ends if it still runs.
func (p *Process) Start(tb testing.TB) {
	tb.Helper()
	if p.Addr == "" {
		p.Addr = testutil.FreeAddr(tb)
	}
	if p.LogPath == "" {
		p.LogPath = filepath.Join(tb.TempDir(), p.Instance+".log")
	}
	logs, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer logs.Close()
	cmd := exec.Command(p.Bin, "serve", "--database-url", p.DatabaseURL, "--listen", p.Addr, "--instance", p.Instance,
		"--log-format", "json", "--access-log=false")
	cmd.Args = append(cmd.Args, p.Args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p.Cmd = cmd
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	testutil.EventuallyOr(tb, 30*time.Second, p.Instance+" to listen", p.listening, func() string { return p.LogTail(3000) })
}

func (p *Process) listening() bool {
	if p.Ready == "tcp" {
		c, err := net.Dial("tcp", p.Addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	path := p.Ready
	if path == "" {
		path = "/id/health"
	}
	resp, err := http.Get(p.Base() + path)
	if err == nil {
		resp.Body.Close()
	}
	return err == nil
}

// Signal sends sig to the process.
func (p *Process) Signal(tb testing.TB, sig os.Signal) {
	tb.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
}

// Stop ends the process with sig and waits for it.
func (p *Process) Stop(tb testing.TB, sig os.Signal) {
	tb.Helper()
	p.Signal(tb, sig)
	p.Cmd.Wait()
}

// LogTail returns the last n bytes of the process's log.
func (p *Process) LogTail(n int) string {
	logs, _ := os.ReadFile(p.LogPath)
	if len(logs) > n {
		logs = logs[len(logs)-n:]
	}
	return string(logs)
}
