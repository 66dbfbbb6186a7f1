package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// process is one idmint binary serving on a loopback port.
type process struct {
	bin, url, addr, instance, logPath string
	args                              []string // more serve flags, after the others: they win
	env                               []string // more environment, after the test's own
	cmd                               *exec.Cmd
	gen                               atomic.Int64 // restarts so far; clients read it
}

func (p *process) start(tb testing.TB) {
	tb.Helper()
	logs, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer logs.Close()
	p.cmd = exec.Command(p.bin, "serve", "--database-url", p.url, "--listen", p.addr, "--instance", p.instance,
		"--log-format", "json", "--access-log=false", "--wait-timeout", "5s")
	p.cmd.Args = append(p.cmd.Args, p.args...)
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	cmd := p.cmd
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + p.addr + "/id/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			logs, _ := os.ReadFile(p.logPath)
			tb.Fatalf("%s did not come up: %v\n%s", p.instance, err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process with sig and waits for it.
func (p *process) stop(tb testing.TB, sig os.Signal) {
	tb.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
	p.cmd.Wait()
}

// fetchID asks for one ID as text. answered reports whether the server
// answered at all.
func fetchID(ctx context.Context, c *http.Client, url string) (id int64, answered bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, true, fmt.Errorf("%s: %s", resp.Status, body)
	}
	id, err = strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	return id, true, err
}

// tail returns the last n bytes of b.
func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }
