package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// Labels on the containers pgtest starts, so that a later run can remove
// those whose test process died before terminating them.
const (
	labelOwnerPID  = "org.idmint.pgtest.owner-pid"
	labelOwnerHost = "org.idmint.pgtest.owner-host"
)

// docker is a PostgreSQL container: from testcontainers' postgres module for
// a single server, a generic one for a replication pair.
type docker struct {
	c testcontainers.Container
}

// loopbackOnly makes testcontainers talk to containers on 127.0.0.1 (where
// pgtest publishes their ports) and not start its reaper, unless the
// environment says otherwise. Without the host override, testcontainers
// running inside a container guesses the default gateway as the Docker host.
func loopbackOnly() {
	if _, ok := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !ok {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
}

// dockerAvailable reports whether a Docker engine answers.
func dockerAvailable(ctx context.Context) (err error) {
	loopbackOnly()
	defer func() {
		// Some of testcontainers' host discovery panics when there is none.
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker engine answers: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("no Docker engine answers: %w", err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("no Docker engine answers: %w", err)
	}
	return nil
}

// startDocker runs a PostgreSQL container with its port published on
// 127.0.0.1 at a host port chosen here, so that the URL survives Stop/Start
// (Docker would pick a new ephemeral port on every start otherwise).
func startDocker(ctx context.Context) (*Server, error) {
	loopbackOnly()
	reapDocker(ctx)
	image := os.Getenv(envImage)
	if image == "" {
		image = defaultImage
	}
	s, err := runOnLoopback(ctx, func(ctx context.Context, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
		c, err := postgres.Run(ctx, image, append([]testcontainers.ContainerCustomizer{
			postgres.WithUsername("postgres"),
			postgres.WithPassword("postgres"),
			postgres.WithDatabase("postgres"),
			postgres.BasicWaitStrategies(),
			testcontainers.WithCmdArgs("-c", "max_connections="+maxConnections),
		}, opts...)...)
		if c == nil {
			return nil, err
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("start container from image %s (set %s to another image, e.g. one built offline by .ci/postgres-image.sh, or %s=local to use local server binaries): %w",
			image, envImage, envMode, err)
	}
	return s, nil
}

// runOnLoopback runs a container through run, with its port 5432 published
// on 127.0.0.1 at a free host port and pgtest's owner labels, and waits
// until it answers a query. The port is free when chosen but may be taken
// before Docker binds it; it tries a few.
func runOnLoopback(ctx context.Context, run func(context.Context, ...testcontainers.ContainerCustomizer) (testcontainers.Container, error)) (*Server, error) {
	var (
		c    testcontainers.Container
		port int
		err  error
	)
	for attempt := 1; ; attempt++ {
		if port, err = freePort(); err != nil {
			return nil, err
		}
		binding := network.PortMap{
			network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}},
		}
		c, err = run(ctx,
			testcontainers.WithLabels(ownerLabels()),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.PortBindings = binding }),
		)
		if err == nil {
			break
		}
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		if attempt == 3 || ctx.Err() != nil || !portTaken(err) {
			return nil, err
		}
	}
	s := &Server{
		kind:    KindTestcontainers,
		url:     fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		backend: &docker{c: c},
	}
	if err := waitReady(ctx, s.url); err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, err
	}
	return s, nil
}

// portTaken reports whether Docker failed to bind the host port.
func portTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "address already in use") || strings.Contains(msg, "port is already allocated")
}

func (d *docker) stop(ctx context.Context, immediate bool) error {
	// Docker sends the image's stop signal (SIGINT, a fast shutdown, in the
	// official image and ours) and SIGKILL after the timeout; a zero timeout
	// is a crash.
	timeout := 30 * time.Second
	if immediate {
		timeout = 0
	}
	return d.c.Stop(ctx, &timeout)
}

func (d *docker) start(ctx context.Context) error {
	// Start runs the wait strategies again; the log strategy counts lines
	// from earlier starts, so Server.Start also waits for a query to work.
	return d.c.Start(ctx)
}

func (d *docker) close(ctx context.Context) error {
	return testcontainers.TerminateContainer(d.c, testcontainers.StopContext(ctx), testcontainers.StopTimeout(0))
}

// reapDocker removes containers started by pgtest on this host whose test
// process is gone.
func reapDocker(ctx context.Context) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return
	}
	defer cli.Close()
	host, _ := os.Hostname()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelOwnerHost+"="+host),
	})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[labelOwnerPID])
		if err != nil || processAlive(pid) {
			continue
		}
		_, rmErr := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if rmErr != nil && !errors.Is(ctx.Err(), context.Canceled) {
			fmt.Fprintf(os.Stderr, "pgtest: removing leftover container %s: %v\n", c.ID, rmErr)
		}
	}
}

// startDockerReplication runs a primary and a standby container on a new
// private network; the standby clones the primary (pg_basebackup -R over
// the network alias "primary") on its first start.
func startDockerReplication(ctx context.Context, tb testing.TB, opts ReplicationOptions) (*Replication, error) {
	loopbackOnly()
	reapDocker(ctx)
	image := os.Getenv(envImage)
	if image == "" {
		image = defaultImage
	}
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(ownerLabels()))
	if err != nil {
		return nil, fmt.Errorf("docker network: %w", err)
	}
	r := &Replication{userinfo: "postgres:postgres"}
	r.register(tb, func(ctx context.Context) error { return nw.Remove(ctx) })

	env := testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": "postgres"})
	if r.Primary, err = runDocker(ctx, image, env,
		tcnetwork.WithNetwork([]string{"primary"}, nw),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(primaryInitScript), ContainerFilePath: "/docker-entrypoint-initdb.d/replication.sh", FileMode: 0o755,
		}),
		testcontainers.WithCmd("postgres", "-c", "max_connections="+maxConnections),
	); err != nil {
		return nil, fmt.Errorf("primary from image %s: %w", image, err)
	}
	if r.Standby, err = runDocker(ctx, image, env,
		testcontainers.WithEnv(map[string]string{"PGTEST_SLOT": opts.Slot}),
		tcnetwork.WithNetwork([]string{"standby"}, nw),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(standbyScript), ContainerFilePath: scriptPath, FileMode: 0o755,
		}),
		testcontainers.WithEntrypoint("/bin/sh", scriptPath),
		testcontainers.WithCmd("-c", "max_connections="+maxConnections),
	); err != nil {
		return nil, fmt.Errorf("standby from image %s: %w", image, err)
	}
	return r, nil
}

// runDocker runs a generic container of image with opts, published on
// loopback (see runOnLoopback).
func runDocker(ctx context.Context, image string, opts ...testcontainers.ContainerCustomizer) (*Server, error) {
	return runOnLoopback(ctx, func(ctx context.Context, more ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
		c, err := testcontainers.Run(ctx, image, append(append([]testcontainers.ContainerCustomizer{
			testcontainers.WithExposedPorts("5432/tcp")}, opts...), more...)...)
		if c == nil {
			return nil, err
		}
		return c, err
	})
}

// ownerLabels mark a container or network as this process's, for reapDocker.
func ownerLabels() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{labelOwnerPID: strconv.Itoa(os.Getpid()), labelOwnerHost: host}
}

func (d *docker) signal(ctx context.Context, pid int, sig syscall.Signal) error {
	code, out, err := d.c.Exec(ctx, []string{"sh", "-c", fmt.Sprintf("kill -%d %d", int(sig), pid)})
	if err != nil {
		return err
	}
	if code != 0 {
		msg, _ := io.ReadAll(out)
		return fmt.Errorf("kill -%d %d in the container: exit %d: %s", int(sig), pid, code, msg)
	}
	return nil
}
