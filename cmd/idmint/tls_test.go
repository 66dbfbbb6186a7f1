package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

// tlsServe is a real idmint serve process over TLS with client
// certificates, on a SQLite file.
type tlsServe struct {
	dir, addr, base   string
	ca, other         *testutil.CA
	serverCert        string // the served key pair's files
	serverKey         string
	clientCert        string // a client certificate of ca
	clientKey         string
	strangerCert      string // a client certificate of another CA
	strangerKey       string
	admin, ids, watch string // tokens: admin, ids, monitor scope
	logPath           string
}

func startTLSServe(t *testing.T) *tlsServe {
	t.Helper()
	dir := t.TempDir()
	s := &tlsServe{dir: dir, addr: testutil.FreeAddr(t), logPath: filepath.Join(dir, "serve.log")}
	s.base = "https://" + s.addr
	s.ca, s.other = testutil.NewCA(t, dir, "idmint"), testutil.NewCA(t, dir, "stranger")
	s.serverCert, s.serverKey = s.ca.Issue(t, dir, "server", 1001, true)
	s.clientCert, s.clientKey = s.ca.Issue(t, dir, "client", 2001, false)
	s.strangerCert, s.strangerKey = s.other.Issue(t, dir, "stranger", 3001, false)

	data := filepath.Join(dir, "data")
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", data)
	s.admin = strings.TrimSpace(idmint(t, "token", "create", "--name", "ops", "--scope", "admin"))
	s.ids = strings.TrimSpace(idmint(t, "token", "create", "--name", "app", "--scope", "ids"))
	s.watch = strings.TrimSpace(idmint(t, "token", "create", "--name", "grafana", "--scope", "monitor"))

	bin := servetest.Build(t)
	logs, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd := exec.Command(bin, "serve", "--listen", s.addr, "--log-format", "json", "--auth", "token", "--protect-monitoring", "--tag", "demo")
	// The TLS settings come from the environment, as in a container.
	cmd.Env = append(os.Environ(), "IDMINT_TLS_CERT="+s.serverCert, "IDMINT_TLS_KEY="+s.serverKey, "IDMINT_TLS_CLIENT_CA="+s.ca.File)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	hc := s.httpClient(t, s.clientCert, s.clientKey, nil)
	testutil.EventuallyOr(t, 30*time.Second, "serve up over TLS", func() bool {
		resp, err := hc.Get(s.base + "/openapi.yaml")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}, s.logs)
	return s
}

func (s *tlsServe) logs() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// tlsConfig trusts s's CA and presents certFile, when given.
func (s *tlsServe) tlsConfig(t *testing.T, certFile, keyFile string) *tls.Config {
	t.Helper()
	cfg, err := client.LoadTLS(s.ca.File, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (s *tlsServe) httpClient(t *testing.T, certFile, keyFile string, edit func(*tls.Config)) *http.Client {
	t.Helper()
	cfg := s.tlsConfig(t, certFile, keyFile)
	if edit != nil {
		edit(cfg)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

var netDialer = net.Dialer{Timeout: 5 * time.Second}

// handshake dials s once with the client certificate.
func (s *tlsServe) handshake(t *testing.T) (*tls.Conn, error) {
	t.Helper()
	return tls.DialWithDialer(&netDialer, "tcp", s.addr, s.tlsConfig(t, s.clientCert, s.clientKey))
}

// TestServe_TLS runs a real idmint serve with --tls-cert, --tls-key and
// --tls-client-ca (from the environment): HTTP/2 over TLS, health and the
// log say so, clients without a certificate of the CA and TLS 1.1 are
// refused, the Go client, the --server mode and healthcheck work over it,
// and the key pair is reloaded while a kept-alive connection goes on.
func TestServe_TLS(t *testing.T) {
	s := startTLSServe(t)
	hc := s.httpClient(t, s.clientCert, s.clientKey, nil)

	t.Run("health", func(t *testing.T) {
		req, _ := http.NewRequest("GET", s.base+"/id/health", nil)
		req.Header.Set("Authorization", "Bearer "+s.watch)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			TLS struct {
				Enabled            bool   `json:"enabled"`
				ClientCertificates string `json:"client_certificates"`
			} `json:"tls"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 2 || !h.TLS.Enabled || h.TLS.ClientCertificates != "required" {
			t.Fatalf("%s, health tls %+v: want HTTP/2, enabled, required", resp.Proto, h.TLS)
		}
		logs := s.logs()
		if !strings.Contains(logs, `"tls":true`) || !strings.Contains(logs, `"client_certificates":"required"`) {
			t.Errorf("the startup log does not say TLS and mTLS are on:\n%s", logs)
		}
		if strings.Contains(logs, "PRIVATE KEY") || strings.Contains(logs, s.admin) {
			t.Errorf("the log holds key material or a token")
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			cert, key string
			edit      func(*tls.Config)
		}{
			{"no client certificate", "", "", nil},
			// Sent whatever CAs the server names, as a client of
			// another CA would.
			{"certificate of another CA", "", "", func(c *tls.Config) {
				c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					cert, err := tls.LoadX509KeyPair(s.strangerCert, s.strangerKey)
					return &cert, err
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, err := s.httpClient(t, tc.cert, tc.key, tc.edit).Get(s.base + "/openapi.yaml")
				if err == nil {
					resp.Body.Close()
					t.Fatalf("answered %s", resp.Status)
				}
				t.Logf("refused: %v", err)
			})
		}
		// An HTTP/1.1 client, as an HTTP/2 one would fail after the
		// handshake anyway (HTTP/2 needs TLS 1.2).
		t.Run("TLS 1.1", func(t *testing.T) {
			cfg := s.tlsConfig(t, s.clientCert, s.clientKey)
			cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
			c, err := tls.DialWithDialer(&netDialer, "tcp", s.addr, cfg)
			if err == nil {
				c.Close()
				t.Fatalf("a TLS 1.1 handshake succeeded (%x)", c.ConnectionState().Version)
			}
			t.Logf("refused: %v", err)
		})
	})

	t.Run("client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.New(ctx, client.Config{URLs: []string{s.base}, Tags: []string{"demo"}, TLS: s.tlsConfig(t, s.clientCert, s.clientKey)}); !errors.Is(err, client.ErrUnauthorized) {
			t.Fatalf("without a token: %v, want ErrUnauthorized", err)
		}
		c, err := client.New(ctx, client.Config{URLs: []string{s.base}, Tags: []string{"demo"}, Token: s.ids, TLS: s.tlsConfig(t, s.clientCert, s.clientKey)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if id, err := c.Next(ctx, "demo"); err != nil || id < 1 {
			t.Fatalf("Next: %d, %v", id, err)
		}
	})

	t.Run("cli", func(t *testing.T) {
		t.Setenv("IDMINT_CA", s.ca.File)
		out := idmint(t, "tag", "list", "--server", s.base, "--token", s.admin, "--cert", s.clientCert, "--key", s.clientKey)
		if !strings.Contains(out, "demo") {
			t.Fatalf("tag list --server over TLS:\n%s", out)
		}
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{"tag", "list", "--server", s.base, "--token", s.admin}, &stdout, &stderr); err == nil {
			t.Fatalf("tag list without a client certificate succeeded:\n%s", stdout.String())
		}
		if out := idmint(t, "healthcheck", "--listen", s.addr, "--token", s.watch, "--cert", s.clientCert, "--key", s.clientKey); strings.TrimSpace(out) != "ok" {
			t.Fatalf("healthcheck over TLS: %q", out)
		}
		// In serve's container: IDMINT_TLS_CERT is serve's certificate.
		t.Setenv("IDMINT_CA", "")
		t.Setenv("IDMINT_TLS_CERT", s.serverCert)
		if out := idmint(t, "healthcheck", "--listen", s.addr, "--token", s.watch, "--cert", s.clientCert, "--key", s.clientKey); strings.TrimSpace(out) != "ok" {
			t.Fatalf("healthcheck pinned to serve's certificate: %q", out)
		}
		other, _ := s.other.Issue(t, s.dir, "impostor", 4001, true)
		if err := run(context.Background(), []string{"healthcheck", "--listen", s.addr, "--token", s.watch, "--cert", s.clientCert, "--key", s.clientKey, "--tls-cert", other}, &stdout, &stderr); err == nil {
			t.Fatal("healthcheck pinned to another certificate succeeded")
		}
		t.Setenv("IDMINT_TLS_CERT", "")
		if out := idmint(t, "drill", "--target", s.base, "--biz-tag", "demo", "--token", s.ids, "--ca", s.ca.File, "--cert", s.clientCert, "--key", s.clientKey,
			"--duration", "500ms", "--concurrency", "2"); !strings.Contains(out, "drill: 2 clients") {
			t.Fatalf("drill over TLS:\n%s", out)
		}
	})

	t.Run("reload", func(t *testing.T) {
		old, err := s.handshake(t)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		if serial := old.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); serial != 1001 {
			t.Fatalf("served serial %d, want 1001", serial)
		}
		rd := bufio.NewReader(old)
		ask := func() error {
			if _, err := io.WriteString(old, "GET /openapi.yaml HTTP/1.1\r\nHost: idmint\r\n\r\n"); err != nil {
				return err
			}
			resp, err := http.ReadResponse(rd, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("answered %s", resp.Status)
			}
			return nil
		}
		if err := ask(); err != nil {
			t.Fatal(err)
		}
		served := func() int64 {
			c, err := s.handshake(t)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		}

		s.ca.Issue(t, s.dir, "server", 1002, true) // the renewal replaces the files
		testutil.EventuallyOr(t, 20*time.Second, "new handshakes served the renewed certificate", func() bool { return served() == 1002 }, s.logs)
		if err := ask(); err != nil {
			t.Fatalf("the connection open before the reload: %v", err)
		}

		// A broken renewal is logged; the last good pair is kept.
		if err := os.WriteFile(s.serverCert, []byte("not a certificate"), 0o600); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyOr(t, 20*time.Second, "the broken certificate logged", func() bool {
			return served() == 1002 && strings.Contains(s.logs(), "tls certificate not reloaded")
		}, s.logs)
		if !strings.Contains(s.logs(), `"msg":"tls certificate reloaded"`) {
			t.Errorf("the reload was not logged")
		}
	})

	// The client CA bundle is read again too: a client of a CA added to
	// it is accepted without a restart, over HTTP/2 still.
	t.Run("client CA reload", func(t *testing.T) {
		stranger := s.httpClient(t, "", "", func(c *tls.Config) {
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				cert, err := tls.LoadX509KeyPair(s.strangerCert, s.strangerKey)
				return &cert, err
			}
		})
		bundle := append(readFile(t, s.ca.File), readFile(t, s.other.File)...)
		writeFile(t, s.ca.File, bundle)
		testutil.EventuallyOr(t, 20*time.Second, "a client of the added CA accepted", func() bool {
			resp, err := stranger.Get(s.base + "/openapi.yaml")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Fatalf("%s after the reload, want HTTP/2", resp.Proto)
			}
			return true
		}, s.logs)
		if !strings.Contains(s.logs(), `"msg":"tls client CA bundle reloaded"`) {
			t.Errorf("the reload was not logged")
		}
	})
}

// TestServe_H2C: serve's plain listener speaks HTTP/2 with prior knowledge
// (h2c), beside HTTP/1.1, on the one port.
func TestServe_H2C(t *testing.T) {
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", t.TempDir())
	base, _ := startServe(t)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p}}
	for _, c := range []struct {
		client *http.Client
		major  int
	}{{h2c, 2}, {&http.Client{Timeout: 10 * time.Second}, 1}} {
		resp, err := c.client.Get(base + "/id?biz_tag=demo")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != c.major {
			t.Errorf("%s %s, want HTTP/%d 200", resp.Proto, resp.Status, c.major)
		}
	}
}

// TestServe_TLSFlags: the TLS flags that cannot work are refused at start.
func TestServe_TLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, dir, "idmint")
	cert, _ := ca.Issue(t, dir, "server", 1, true)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--tls-cert", cert}, "go together"},
		{"client CA without cert", []string{"--tls-client-ca", ca.File}, "needs --tls-cert"},
		{"key of another pair", []string{"--tls-cert", cert, "--tls-key", ca.File}, "tls key pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("IDMINT_DATABASE_URL", "")
			t.Setenv("IDMINT_DATA_DIR", t.TempDir())
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"serve", "--listen", testutil.FreeAddr(t)}, tc.args...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve %v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}
