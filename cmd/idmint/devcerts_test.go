package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestDevCerts runs `idmint dev-certs`, then serve with the flags it
// printed: a request with its client certificate gets an ID, one without a
// client certificate is refused. The keys are 0600, the server certificate
// names localhost, 127.0.0.1 and ::1, and a second run replaces nothing
// without --force.
func TestDevCerts(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	out := idmint(t, "dev-certs", "--dir", certs)

	for _, name := range []string{"server-key.pem", "client-key.pem"} {
		fi, err := os.Stat(filepath.Join(certs, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	server := readCert(t, filepath.Join(certs, "server.pem"))
	if !slices.Contains(server.DNSNames, "localhost") || len(server.IPAddresses) != 2 ||
		!server.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || !server.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("server certificate names %v %v, want localhost, 127.0.0.1 and ::1", server.DNSNames, server.IPAddresses)
	}

	// The flags come from what dev-certs printed, as a user pastes them.
	serveArgs := printedLine(t, out, "idmint serve ")[1:]
	curlArgs := printedLine(t, out, "curl ")
	addr := testutil.FreeAddr(t)
	for i, a := range serveArgs {
		if a == "--listen" {
			serveArgs[i+1] = addr
		}
	}
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", filepath.Join(dir, "data"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &testlog.Buffer{}
	go func() {
		done <- run(ctx, append(serveArgs, "--log-format", "json"), io.Discard, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v\n%s", err, logs.String())
			}
		case <-time.After(time.Minute):
			t.Errorf("serve did not stop within a minute of its context's end")
		}
	})

	withCert := tlsClient(t, flagValue(t, curlArgs, "--cacert"), flagValue(t, curlArgs, "--cert"), flagValue(t, curlArgs, "--key"))
	url := "https://" + addr + "/id?biz_tag=demo"
	var status int
	testutil.EventuallyOr(t, 30*time.Second, "serve up over TLS", func() bool {
		resp, err := withCert.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		return true
	}, logs.String)
	if status != http.StatusOK {
		t.Fatalf("GET /id with the client certificate: %d", status)
	}

	without := tlsClient(t, flagValue(t, curlArgs, "--cacert"), "", "")
	if resp, err := without.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("GET /id without a client certificate: %s, want the handshake refused", resp.Status)
	}

	t.Run("no overwrite without --force", func(t *testing.T) {
		before, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{"dev-certs", "--dir", certs}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("a second dev-certs into %s: %v, want an error that names --force", certs, err)
		}
		if after, _ := os.ReadFile(filepath.Join(certs, "ca.pem")); !bytes.Equal(before, after) {
			t.Fatal("a refused dev-certs changed ca.pem")
		}
		idmint(t, "dev-certs", "--dir", certs, "--force")
		if after, _ := os.ReadFile(filepath.Join(certs, "ca.pem")); bytes.Equal(before, after) {
			t.Fatal("dev-certs --force left ca.pem as it was")
		}
	})
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// printedLine returns the words of the line of out that starts with
// prefix, after its indent.
func printedLine(t *testing.T, out, prefix string) []string {
	t.Helper()
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			return strings.Fields(line)
		}
	}
	t.Fatalf("dev-certs printed no line starting %q:\n%s", prefix, out)
	return nil
}

func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	i := slices.Index(args, name)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("%v: no %s", args, name)
	}
	return args[i+1]
}

func tlsClient(t *testing.T, ca, cert, key string) *http.Client {
	t.Helper()
	cfg, err := client.LoadTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}
