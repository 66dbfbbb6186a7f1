package hacluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errExited reports that a process of the cluster is gone: waiting for it
// to answer is pointless.
var errExited = errors.New("hacluster: process exited")

// proc is a process the cluster started, in its own process group.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{} // closed once the process was waited for
}

// start runs bin in dir as the server's user, in a new process group that
// dies with this process, with its output appended to dir/logName and env
// added to its environment.
func (c *Cluster) start(dir, logName string, env []string, bin string, args ...string) (*proc, error) {
	p := &proc{name: filepath.Base(bin) + " in " + filepath.Base(dir), log: filepath.Join(dir, logName), done: make(chan struct{})}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(append(cleanEnv(), "HOME="+dir, "LC_ALL=C.UTF-8"), env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: c.cred}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("hacluster: start %s: %w", p.name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// check returns err, or errExited if the process is gone.
func (p *proc) check(err error) error {
	select {
	case <-p.done:
		log, _ := os.ReadFile(p.log)
		return fmt.Errorf("%w: %s: %v; its log ends:\n%s", errExited, p.name, p.cmd.ProcessState, log[max(0, len(log)-2000):])
	default:
		return err
	}
}

// signal sends sig to the process group, unless the process is gone.
func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("%w: %s", errExited, p.name)
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("hacluster: signal %v to %s: %w", sig, p.name, err)
	}
	return nil
}

// kill sends SIGKILL to the process group and waits for the process.
func (p *proc) kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("hacluster: kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("hacluster: %s outlived SIGKILL by 10s", p.name)
	}
}

// killPostmaster sends SIGKILL to the postmaster of data and to every
// server process it started, and waits until the postmaster is gone.
// Patroni starts the server in a session of its own, so killing Patroni's
// process group leaves it running.
func killPostmaster(data string) error {
	pid, err := postmasterPID(data)
	if err != nil {
		return nil // never started, shut down, or long gone
	}
	children := childrenOf(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("hacluster: kill postmaster %d: %w", pid, err)
	}
	for _, child := range children {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("hacluster: postmaster %d outlived SIGKILL by 10s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// postmasterPID returns the PID of the running postmaster of data.
func postmasterPID(data string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("hacluster: no server runs on %s: %w", data, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("hacluster: %s/postmaster.pid names no process", data)
	}
	// A stale pid file may name someone else's process now.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(data)) {
		return 0, fmt.Errorf("hacluster: the postmaster of %s is gone", data)
	}
	return pid, nil
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := statField(child); ppid == pid {
			kids = append(kids, child)
		}
	}
	return kids
}

// statField returns the parent and the state of pid from /proc/pid/stat.
func statField(pid int) (ppid int, state string) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, ""
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	_, state := statField(pid)
	return state != "" && state != "Z"
}

// reap stops the servers of clusters whose starting process died before
// closing them (a test timeout, a kill) and removes their directories.
// Their etcd and Patroni died with that process.
func reap() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created right now, or not ours to judge
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || alive(owner) {
			continue
		}
		datas, _ := filepath.Glob(filepath.Join(dir, "node*", "data"))
		for _, data := range datas {
			_ = killPostmaster(data)
		}
		_ = os.RemoveAll(dir)
	}
}

// cleanEnv is the environment without libpq's and the locale's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
