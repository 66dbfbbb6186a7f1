package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicationOptions configures NewReplication.
type ReplicationOptions struct {
	// Synchronous makes the standby synchronous: the primary runs with
	// synchronous_standby_names = '*' (set once the standby streams), so a
	// commit with synchronous_commit=on returns only after the standby has
	// flushed it. Otherwise the standby is asynchronous, PostgreSQL's
	// default.
	Synchronous bool
	// Slot, when set, makes the standby stream through a physical
	// replication slot of that name on the primary (pg_basebackup -C -S):
	// the primary then keeps the standby's WAL while it is away, and the
	// slot's restart_lsn tells how far it flushed.
	Slot string
}

// Replication is a primary and a streaming standby made from it with
// pg_basebackup: two local servers (initdb, pg_basebackup and pg_ctl, run as
// the user postgres when the tests run as root) or two containers on one
// Docker network, chosen like Shared's server. Both publish their port on
// 127.0.0.1.
//
// It offers what a failover drill needs: make the standby lag while it stays
// connected (StallWAL), kill the primary (KillPrimary), and promote the
// standby (Promote). Primary and Standby are ordinary Servers:
// Stop and Start work on each.
type Replication struct {
	Primary *Server
	Standby *Server

	userinfo string // user[:password] of both servers' admin URLs

	mu       sync.Mutex // protects stalled and receiver
	stalled  int        // pid of the primary's stopped WAL sender; 0 when none
	receiver int        // pid of the standby's stopped WAL receiver; 0 when none
}

// signaller is a backend that can signal one of its server's processes.
type signaller interface {
	signal(ctx context.Context, pid int, sig syscall.Signal) error
}

// NewReplication starts a primary and a streaming standby for tb and removes
// both when tb's test finishes. It skips the test where pgtest can only use
// an external server (IDMINT_TEST_PG=external), which it cannot replicate.
// Starting the pair takes seconds.
func NewReplication(tb testing.TB, opts ReplicationOptions) *Replication {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	var (
		r   *Replication
		err error
	)
	switch mode := os.Getenv(envMode); mode {
	case "external":
		tb.Skipf("pgtest: %s=external: an external server cannot be replicated", envMode)
	case "docker":
		if err = dockerAvailable(ctx); err == nil {
			r, err = startDockerReplication(ctx, tb, opts)
		}
	case "local":
		r, err = startLocalReplication(ctx, tb, opts)
	case "":
		// As start: Docker, else local binaries (no engine, or an
		// engine offline without the image).
		if err = dockerAvailable(ctx); err == nil {
			r, err = startDockerReplication(ctx, tb, opts)
		}
		if err != nil {
			fallingBack(err)
			r, err = startLocalReplication(ctx, tb, opts)
		}
	default:
		err = fmt.Errorf("%s=%q: want external, docker, local or unset", envMode, mode)
	}
	if err != nil {
		tb.Fatalf("pgtest: replication: %v", err)
	}
	if err := r.waitStreaming(ctx); err != nil {
		tb.Fatalf("pgtest: replication: %v", err)
	}
	if opts.Synchronous {
		if err := r.makeSynchronous(ctx); err != nil {
			tb.Fatalf("pgtest: replication: %v", err)
		}
	}
	return r
}

// register closes both servers when tb's test finishes, the standby first
// (and a stalled WAL sender resumed, so that the primary can stop).
func (r *Replication) register(tb testing.TB, more func(context.Context) error) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		_ = r.signalStalled(ctx, syscall.SIGCONT)
		_ = r.signalReceiver(ctx, syscall.SIGCONT)
		var errs []error
		for _, s := range []*Server{r.Standby, r.Primary} {
			if s != nil {
				errs = append(errs, s.close(ctx))
			}
		}
		if more != nil {
			errs = append(errs, more(ctx))
		}
		if err := errors.Join(errs...); err != nil {
			tb.Errorf("pgtest: stopping the replication pair: %v", err)
		}
	})
}

// startLocalReplication runs a primary with initdb and a standby with
// pg_basebackup -R from it, each in its own temporary directory. initdb's
// trust rules already allow replication connections on 127.0.0.1.
func startLocalReplication(ctx context.Context, tb testing.TB, opts ReplicationOptions) (*Replication, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	r := &Replication{userinfo: "postgres"}
	r.register(tb, nil)
	if r.Primary, err = startLocal(ctx, bin); err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	primary := r.Primary.backend.(*local)
	standby, err := newLocal(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("standby: %w", err)
	}
	args := []string{"-h", "127.0.0.1", "-p", fmt.Sprint(primary.port), "-U", "postgres",
		"-D", standby.data, "-R", "-X", "stream", "-c", "fast", "--no-sync"}
	if opts.Slot != "" {
		args = append(args, "-C", "-S", opts.Slot)
	}
	if err := standby.run(ctx, "pg_basebackup", args...); err != nil {
		_ = standby.close(context.Background())
		return nil, fmt.Errorf("standby: %w", err)
	}
	if r.Standby, err = standby.serve(ctx); err != nil {
		_ = standby.close(context.Background())
		return nil, fmt.Errorf("standby: %w", err)
	}
	return r, nil
}

func (l *local) signal(_ context.Context, pid int, sig syscall.Signal) error {
	return syscall.Kill(pid, sig)
}

// PrimaryURL returns the URL of database db on the primary (as it was
// started: after Promote, the standby is the one that takes writes).
func (r *Replication) PrimaryURL(db string) string { return r.hostURL(r.Primary, db) }

// StandbyURL returns the URL of database db on the standby.
func (r *Replication) StandbyURL(db string) string { return r.hostURL(r.Standby, db) }

func (r *Replication) hostURL(s *Server, db string) string {
	u, _ := url.Parse(s.url)
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", r.userinfo, u.Host, db)
}

// URL returns a multi-host URL of database db, primary first, with
// target_session_attrs=read-write: a client connects to whichever of the two
// takes writes, and follows a promotion by reconnecting.
func (r *Replication) URL(db string) string {
	p, _ := url.Parse(r.Primary.url)
	s, _ := url.Parse(r.Standby.url)
	return fmt.Sprintf("postgres://%s@%s,%s/%s?sslmode=disable&target_session_attrs=read-write", r.userinfo, p.Host, s.Host, db)
}

// NewDatabase creates a database with a unique name on the primary, waits
// until the standby has it too, and returns its name: URL, PrimaryURL and
// StandbyURL make URLs of it. The database goes away with the pair.
func (r *Replication) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := databaseName(tb.Name())
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := r.Primary.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	r.WaitReplayed(tb)
	return name
}

// WaitReplayed waits until the standby has replayed all the WAL the primary
// had written when it was called.
func (r *Replication) WaitReplayed(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	err := withConn(ctx, r.Primary.url, func(conn *pgx.Conn) error {
		var lsn string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return err
		}
		return poll(ctx, "the standby to replay "+lsn, func() (bool, error) {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE replay_lsn >= $1::pg_lsn", lsn).Scan(&n)
			return n > 0, err
		})
	})
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
}

// StallWAL makes the standby lag while it stays connected: the primary's
// WAL sender for it is stopped (SIGSTOP), so the primary still lists the
// standby as streaming in pg_stat_replication, but sends it nothing more
// until ResumeWAL. Stopping the sender, not the standby's receiver, keeps
// the WAL on the primary: nothing sits in socket buffers to arrive later.
// This is the standby of an asynchronous failover that loses the last
// commits.
func (r *Replication) StallWAL(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled != 0 {
		return
	}
	var pid int
	err := withConn(ctx, r.Primary.url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pid FROM pg_stat_replication WHERE state = 'streaming' LIMIT 1").Scan(&pid)
	})
	if err == nil {
		err = r.Primary.backend.(signaller).signal(ctx, pid, syscall.SIGSTOP)
	}
	if err != nil {
		tb.Fatalf("pgtest: stall the primary's WAL sender: %v", err)
	}
	r.stalled = pid
}

// ResumeWAL lets a WAL sender stopped by StallWAL run again.
func (r *Replication) ResumeWAL(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := r.signalStalled(ctx, syscall.SIGCONT); err != nil {
		tb.Fatalf("pgtest: resume the primary's WAL sender: %v", err)
	}
}

// StallReceiver makes the standby lag while the primary keeps sending: the
// standby's WAL receiver is stopped (SIGSTOP), so pg_stat_replication on
// the primary shows sent_lsn running ahead of flush_lsn (what it sent sits
// in socket buffers, never flushed), until ResumeReceiver. A wait that
// compared the grant with sent_lsn would pass; one with flush_lsn holds.
func (r *Replication) StallReceiver(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.receiver != 0 {
		return
	}
	var pid int
	err := withConn(ctx, r.Standby.url, func(conn *pgx.Conn) error {
		return poll(ctx, "the standby's WAL receiver", func() (bool, error) {
			err := conn.QueryRow(ctx, "SELECT COALESCE(max(pid), 0) FROM pg_stat_wal_receiver WHERE status = 'streaming'").Scan(&pid)
			return pid != 0, err
		})
	})
	if err == nil {
		err = r.Standby.backend.(signaller).signal(ctx, pid, syscall.SIGSTOP)
	}
	if err != nil {
		tb.Fatalf("pgtest: stall the standby's WAL receiver: %v", err)
	}
	r.receiver = pid
}

// ResumeReceiver lets a WAL receiver stopped by StallReceiver run again.
func (r *Replication) ResumeReceiver(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := r.signalReceiver(ctx, syscall.SIGCONT); err != nil {
		tb.Fatalf("pgtest: resume the standby's WAL receiver: %v", err)
	}
}

// signalReceiver sends sig to the stalled WAL receiver, if any, and
// forgets it.
func (r *Replication) signalReceiver(ctx context.Context, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.receiver == 0 {
		return nil
	}
	err := r.Standby.backend.(signaller).signal(ctx, r.receiver, sig)
	r.receiver = 0
	return err
}

// ReceiveWAL runs pg_receivewal (the local binaries, as the server user)
// against the primary until tb's test ends: a WAL sender that is not a
// standby. It skips the test without local binaries.
func (r *Replication) ReceiveWAL(tb testing.TB) {
	tb.Helper()
	bin, err := findBinaries()
	if err != nil {
		Skip(tb, "pgtest: pg_receivewal: "+err.Error())
	}
	cred, err := ServerUser()
	if err != nil {
		tb.Fatalf("pgtest: pg_receivewal: %v", err)
	}
	dir, err := os.MkdirTemp("", localPrefix+"wal-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_receivewal"), "-d", r.PrimaryURL("postgres"), "-D", dir, "--no-loop", "-s", "1")
	cmd.Env = cleanEnv()
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("pgtest: pg_receivewal: %v", err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("pg_receivewal said: %s", out.String())
		}
	})
}

// KillPrimary kills the primary like a crash (a stalled WAL sender first, so
// that it sends nothing more). The standby keeps what it received.
func (r *Replication) KillPrimary(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	_ = r.signalStalled(ctx, syscall.SIGKILL)
	r.Primary.Stop(tb, true)
}

// signalStalled sends sig to the stalled WAL sender, if any, and forgets it.
func (r *Replication) signalStalled(ctx context.Context, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled == 0 {
		return nil
	}
	err := r.Primary.backend.(signaller).signal(ctx, r.stalled, sig)
	r.stalled = 0
	return err
}

// Promote promotes the standby (pg_promote) and waits until it takes writes.
// Whatever WAL it had not received is lost, as in a real failover to a
// lagging replica. Kill the primary first (KillPrimary): two servers taking
// writes is a split brain.
func (r *Replication) Promote(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	err := withConn(ctx, r.Standby.url, func(conn *pgx.Conn) error {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return errors.New("pg_promote returned false")
		}
		return poll(ctx, "the promoted standby to take writes", func() (bool, error) {
			var recovering bool
			err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
			return !recovering, err
		})
	})
	if err != nil {
		tb.Fatalf("pgtest: promote the standby: %v", err)
	}
}

// waitStreaming waits until the primary lists the standby as streaming.
func (r *Replication) waitStreaming(ctx context.Context) error {
	return withConn(ctx, r.Primary.url, func(conn *pgx.Conn) error {
		return poll(ctx, "the standby to stream", func() (bool, error) {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n)
			return n > 0, err
		})
	})
}

// makeSynchronous sets synchronous_standby_names on the primary and waits
// until the standby is listed as synchronous. It is set after the base
// backup, so the standby, once promoted, does not wait for a standby of its
// own.
func (r *Replication) makeSynchronous(ctx context.Context) error {
	return withConn(ctx, r.Primary.url, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return err
		}
		return poll(ctx, "the standby to be synchronous", func() (bool, error) {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").Scan(&n)
			return n > 0, err
		})
	})
}

// withConn runs f on a new connection to url.
func withConn(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(conn)
}

// poll calls cond every 20ms until it holds, fails, or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		switch {
		case err != nil:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case ok:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// standbyScript is the entrypoint of a standby container: as root it
// prepares the data directory and becomes postgres; as postgres it clones
// the primary with pg_basebackup -R on the first start (the image would run
// initdb instead), then runs the server.
const standbyScript = `#!/bin/sh
set -eu
if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chmod 0700 "$PGDATA"
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	tries=0
	until pg_basebackup -h primary -U postgres -D "$PGDATA" -R -X stream -c fast --no-sync ${PGTEST_SLOT:+-C -S "$PGTEST_SLOT"}; do
		tries=$((tries + 1))
		[ "$tries" -lt 120 ] || exit 1
		rm -rf "$PGDATA"/*
		sleep 0.5
	done
fi
exec postgres "$@"
`

// primaryInitScript lets the standby container replicate from the primary
// over the pair's private network.
const primaryInitScript = `#!/bin/sh
printf '\nhost replication all all trust\n' >>"$PGDATA/pg_hba.conf"
`

// scriptPath is where the standby script goes in its container.
var scriptPath = filepath.Join("/usr/local/bin", "pgtest-standby.sh")
