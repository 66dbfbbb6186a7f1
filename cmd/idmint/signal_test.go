package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/servetest"
)

// TestServe_SignalExitsZero runs serve as a real process, as a terminal's
// Ctrl-C or a supervisor's stop reaches it, and wants exit status 0 after
// the clean shutdown: directly with SIGINT and SIGTERM, and through
// `make run`, where the whole process group gets the SIGINT (go run exited
// 1 there whatever its child did, and make said "Error 1"). make itself,
// interrupted, always ends by re-raising the signal; what counts there is
// that it has no failed command to report.
func TestServe_SignalExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := servetest.Build(t)
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		// viaMake is set when the command is make, which dies by the signal.
		viaMake bool
		cmd     func(dataDir string) *exec.Cmd
	}{
		{"serve SIGINT", syscall.SIGINT, false, func(string) *exec.Cmd { return exec.Command(bin, "serve") }},
		{"serve SIGTERM", syscall.SIGTERM, false, func(string) *exec.Cmd { return exec.Command(bin, "serve") }},
		{"make run SIGINT", syscall.SIGINT, true, func(dir string) *exec.Cmd {
			if _, err := exec.LookPath("make"); err != nil {
				t.Skip("no make")
			}
			cmd := exec.Command("make", "--no-print-directory", "-C", "../..", "run", "BIN="+filepath.Join(dir, "bin", "idmint"))
			return cmd
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := tc.cmd(dir)
			cmd.Env = append(os.Environ(), "IDMINT_DATA_DIR="+dir, "IDMINT_LISTEN=127.0.0.1:0", "IDMINT_LOG_FORMAT=json")
			// Its own process group, signalled as a whole as a terminal does.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var stderr lockedBuffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			exited := make(chan struct{})
			go func() { done <- cmd.Wait(); close(exited) }()
			t.Cleanup(func() {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
			})
			// make run builds first: up to a minute on a cold cache.
			deadline := time.Now().Add(2 * time.Minute)
			for !strings.Contains(stderr.String(), `"idmint serving"`) {
				select {
				case err := <-done:
					t.Fatalf("exited before serving: %v\n%s", err, stderr.String())
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("not serving after 2m:\n%s", stderr.String())
				}
			}
			if err := syscall.Kill(-cmd.Process.Pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if tc.viaMake {
					if strings.Contains(stderr.String(), "make: ***") {
						t.Fatalf("after %v and a clean shutdown make reports a failure:\n%s", tc.sig, stderr.String())
					}
					break
				}
				if err != nil {
					t.Fatalf("after %v and a clean shutdown: %v, want exit status 0\n%s", tc.sig, err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("still running 30s after %v:\n%s", tc.sig, stderr.String())
			}
			if !strings.Contains(stderr.String(), `"idmint stopped"`) {
				t.Fatalf("no clean shutdown:\n%s", stderr.String())
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
