package client_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClient_LeanModule builds a program of its own that imports the Go
// client, as a user's module would (the idmint modules replaced by this
// checkout while they are unpublished), and counts what its go.sum holds:
// the client, segment and wire are modules of their own so that a program
// gets only what the client needs, not the server's dependencies.
func TestClient_LeanModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build on a module of its own")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/orders\n\ngo 1.26\n\n"+
		"require github.com/idmint/idmint/client v0.0.0-00010101000000-000000000000\n\n"+
		"replace (\n"+
		"\tgithub.com/idmint/idmint/client => "+filepath.Join(root, "client")+"\n"+
		"\tgithub.com/idmint/idmint/segment => "+filepath.Join(root, "segment")+"\n"+
		"\tgithub.com/idmint/idmint/wire => "+filepath.Join(root, "wire")+"\n)\n")
	write("main.go", `package main

import (
	"context"
	"fmt"

	"github.com/idmint/idmint/client"
)

func main() {
	c, err := client.New(context.Background(), client.Config{URLs: []string{"http://127.0.0.1:8080"}})
	if err != nil {
		panic(err)
	}
	defer c.Close(context.Background())
	fmt.Println(c.Next(context.Background(), "order"))
}
`)
	// Seeded with the main module's sums, so that tidy needs no checksum
	// database for what it keeps; it drops every line the program does not
	// need.
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sums))
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", filepath.Join(dir, "orders"), ".")

	got, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(got, []byte("\n"))
	t.Logf("a program importing the client: %d go.sum lines\n%s", lines, got)
	if lines > 10 {
		t.Errorf("go.sum holds %d lines, want at most 10 beyond the idmint modules:\n%s", lines, got)
	}
	for _, m := range strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all")) {
		if m != "example.com/orders" && m != "github.com/google/uuid" && !strings.HasPrefix(m, "github.com/idmint/idmint/") {
			t.Errorf("the program's module graph holds %s, which the client does not need", m)
		}
	}
}
