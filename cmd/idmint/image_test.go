package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/idmint/idmint/testkit/pgtest"
)

// TestImage runs the idmint container image (IDMINT_TEST_IMAGE, built by
// `make image`) against a PostgreSQL container on a private Docker network,
// as docker-compose.yml does: migrations at start, the health check the image
// ships, a tag created with the image's own binary, IDs over HTTP.
func TestImage(t *testing.T) {
	image := os.Getenv("IDMINT_TEST_IMAGE")
	if image == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("IDMINT_TEST_IMAGE is not set: CI must build the idmint image (make image) and test it")
		}
		pgtest.SkipOptional(t, "IDMINT_TEST_IMAGE not set: build the image with `make image IMAGE=idmint:dev` and set IDMINT_TEST_IMAGE=idmint:dev")
	}
	pgImage := os.Getenv("IDMINT_TEST_POSTGRES_IMAGE")
	if pgImage == "" {
		pgImage = "postgres:17-alpine"
	}
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		t.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1") // loopback only
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	net, err := tcnetwork.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Remove(context.Background()) })

	pg, err := postgres.Run(ctx, pgImage,
		postgres.WithUsername("idmint"), postgres.WithPassword("idmint"), postgres.WithDatabase("idmint"),
		postgres.BasicWaitStrategies(),
		tcnetwork.WithNetwork([]string{"postgres"}, net),
	)
	testcontainers.CleanupContainer(t, pg)
	if err != nil {
		t.Fatal(err)
	}

	loopback := network.PortMap{
		network.MustParsePort("8080/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1")}},
	}
	app, err := testcontainers.Run(ctx, image,
		testcontainers.WithCmd("serve"),
		testcontainers.WithEnv(map[string]string{
			"IDMINT_DATABASE_URL": "postgres://idmint:idmint@postgres:5432/idmint?sslmode=disable",
			"IDMINT_MIGRATE":      "true",
		}),
		testcontainers.WithExposedPorts("8080/tcp"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.PortBindings = loopback }),
		tcnetwork.WithNetwork([]string{"idmint"}, net),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/id/health").WithPort("8080/tcp").WithStartupTimeout(time.Minute)),
	)
	testcontainers.CleanupContainer(t, app)
	if err != nil {
		t.Fatal(err)
	}

	exec := func(args ...string) string {
		t.Helper()
		code, out, err := app.Exec(ctx, args)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(out)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, b)
		}
		return string(b)
	}
	exec("/idmint", "healthcheck") // the compose health check
	if out := exec("/idmint", "tag", "create", "order", "--step", "10"); !strings.Contains(out, "order") {
		t.Fatalf("tag create: %s", out)
	}

	endpoint, err := app.PortEndpoint(ctx, "8080/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", endpoint)
	}
	for want := 1; want <= 25; want++ {
		resp, err := http.Get(endpoint + "/id?biz_tag=order")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ ID string }
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || got.ID != fmt.Sprint(want) {
			t.Fatalf("GET /id: %d %+v %v, want id %d", resp.StatusCode, got, err, want)
		}
	}
}
