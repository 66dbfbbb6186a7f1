package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
)

// reloadClock is a tlsReloader's clock, moved by hand a check at a time.
type reloadClock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

func newReloadClock() *reloadClock { return &reloadClock{now: time.Unix(1_700_000_000, 0)} }

func (c *reloadClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// next moves the clock to the next check.
func (c *reloadClock) next() { c.mu.Lock(); c.now = c.now.Add(certCheckEvery); c.mu.Unlock() }

// serveTLSConfig serves cfg on a loopback port: every connection whose
// handshake succeeds is sent "ok" and closed.
func serveTLSConfig(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					io.WriteString(c, "ok")
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// tlsDial is a client of serveTLSConfig: it trusts roots, presents pair
// (nil: none) and keeps sessions in cache (nil: none).
type tlsDial struct {
	addr  string
	roots *x509.CertPool
	pair  *tls.Certificate
	cache tls.ClientSessionCache
}

// do handshakes and reads the server's "ok": in TLS 1.3 a client
// certificate the server refuses shows only then. It returns the served
// certificate's serial and the connection's state.
func (d tlsDial) do(t *testing.T) (int64, tls.ConnectionState, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: d.roots, ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}, ClientSessionCache: d.cache}
	if d.pair != nil {
		cfg.Certificates = []tls.Certificate{*d.pair}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", d.addr, cfg)
	if err != nil {
		return 0, tls.ConnectionState{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cs := c.ConnectionState()
	serial := cs.PeerCertificates[0].SerialNumber.Int64()
	got, err := io.ReadAll(c)
	if err == nil && string(got) != "ok" {
		err = io.ErrUnexpectedEOF
	}
	return serial, cs, err
}

// serial is the served certificate's serial; the handshake must succeed.
func (d tlsDial) serial(t *testing.T) int64 {
	t.Helper()
	serial, _, err := d.do(t)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return serial
}

// stampFiles sets the modification time of paths to at, as a deploy
// step would leave it, so that no test depends on the file system's clock
// ticking between two writes.
func stampFiles(t *testing.T, at time.Time, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func poolOf(t *testing.T, cas ...*testutil.CA) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca.Cert)
	}
	return pool
}

// keyPair is a client certificate of ca, with its key.
func keyPair(t *testing.T, dir string, ca *testutil.CA, name string, serial int64) *tls.Certificate {
	t.Helper()
	certFile, keyFile := ca.Issue(t, dir, name, serial, false)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// unreadable returns b's bytes garbled, of b's length: a file a load
// cannot use, however the test runs (as root, chmod 000 stops no read),
// that becomes good again without a change of size.
func unreadable(b []byte) []byte { return bytes.Repeat([]byte{'#'}, len(b)) }

// TestTLSReloader_KeyPair: the key pair served through real handshakes is
// read again only at a check after its files changed; a renewal whose key
// cannot be loaded at first (written, then made readable without a change
// of its modification time or size, as a deploy hook's chown does) is
// served within two checks once it can, the last good pair meanwhile; the
// failure is logged once however many checks it lasts; ALPN offers h2.
func TestTLSReloader_KeyPair(t *testing.T) {
	dir, stage := t.TempDir(), t.TempDir()
	ca := testutil.NewCA(t, dir, "idmint")
	certFile, keyFile := ca.Issue(t, dir, "server", 1, true)
	clock := newReloadClock()
	logs := &testlog.Buffer{}
	r, err := newTLSReloader(certFile, keyFile, "", slog.New(slog.NewTextHandler(logs, nil)), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	d := tlsDial{addr: serveTLSConfig(t, r.serverConfig()), roots: poolOf(t, ca)}
	serial, cs, err := d.do(t)
	if err != nil || serial != 1 || cs.NegotiatedProtocol != "h2" {
		t.Fatalf("serial %d over %q, %v: want 1 over h2", serial, cs.NegotiatedProtocol, err)
	}

	renewed := time.Now().Add(time.Hour).Truncate(time.Second)
	ca.Issue(t, dir, "server", 2, true)
	stampFiles(t, renewed, certFile, keyFile)
	if got := d.serial(t); got != 1 {
		t.Fatalf("serial %d before the next check, want 1", got)
	}
	clock.next()
	if got := d.serial(t); got != 2 {
		t.Fatalf("serial %d at the check after the renewal, want 2", got)
	}

	// The deploy hook copies the renewed pair; the key cannot be loaded yet.
	newCert, newKey := ca.Issue(t, stage, "server", 3, true)
	renewed = renewed.Add(time.Hour)
	key := readFile(t, newKey)
	writeFile(t, certFile, readFile(t, newCert))
	writeFile(t, keyFile, unreadable(key))
	stampFiles(t, renewed, certFile, keyFile)
	for check := range 3 {
		clock.next()
		if got := d.serial(t); got != 2 {
			t.Fatalf("check %d: serial %d while the key cannot be loaded, want the last good 2", check, got)
		}
	}
	if n := strings.Count(logs.String(), "tls certificate not reloaded"); n != 1 {
		t.Fatalf("the failed load logged %d times over three checks, want once:\n%s", n, logs.String())
	}
	failed, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	// Then it can: same size, same modification time.
	writeFile(t, keyFile, key)
	stampFiles(t, renewed, keyFile)
	if st, err := os.Stat(keyFile); err != nil || st.Size() != failed.Size() || !st.ModTime().Equal(failed.ModTime()) {
		t.Fatalf("the key's stamp changed (%v): the test proves nothing", err)
	}
	served := d.serial(t)
	for range 2 {
		if served == 3 {
			break
		}
		clock.next()
		served = d.serial(t)
	}
	if served != 3 {
		t.Fatalf("serial %d two checks after the key became loadable, want 3:\n%s", served, logs.String())
	}
	if !strings.Contains(logs.String(), "tls certificate reloaded") {
		t.Errorf("the reload was not logged:\n%s", logs.String())
	}

	t.Run("many handshakes while the pair changes", func(t *testing.T) {
		ca.Issue(t, dir, "server", 4, true)
		stampFiles(t, renewed.Add(time.Hour), certFile, keyFile)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					if cfg, err := r.configForClient(nil); err != nil || cfg == nil || len(cfg.Certificates) != 1 {
						t.Errorf("configForClient: %v, %v", cfg, err)
						return
					}
					clock.next()
				}
			})
		}
		wg.Wait()
		if got := d.serial(t); got != 4 {
			t.Fatalf("serial %d, want 4", got)
		}
	})
}

// TestTLSReloader_ClientCA: the client CA bundle is read again on the key
// pair's schedule: a client of a CA added to it is accepted after the next
// check; a bundle cut short keeps the last good one; one that cannot be
// loaded at first and then can, with the same modification time and size,
// is used within two checks; a CA removed refuses its clients, resumed
// sessions included.
func TestTLSReloader_ClientCA(t *testing.T) {
	dir := t.TempDir()
	ca, other := testutil.NewCA(t, dir, "idmint"), testutil.NewCA(t, dir, "partner")
	certFile, keyFile := ca.Issue(t, dir, "server", 1, true)
	ours := keyPair(t, dir, ca, "client", 2)
	theirs := keyPair(t, dir, other, "partner-client", 3)
	bundle := filepath.Join(dir, "clients-ca.pem")
	caPEM, otherPEM := readFile(t, ca.File), readFile(t, other.File)
	writeFile(t, bundle, caPEM)

	clock := newReloadClock()
	logs := &testlog.Buffer{}
	r, err := newTLSReloader(certFile, keyFile, bundle, slog.New(slog.NewTextHandler(logs, nil)), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLSConfig(t, r.serverConfig())
	dial := func(pair *tls.Certificate, cache tls.ClientSessionCache) tlsDial {
		return tlsDial{addr: addr, roots: poolOf(t, ca), pair: pair, cache: cache}
	}
	accepted := func(pair *tls.Certificate, cache tls.ClientSessionCache) bool {
		_, _, err := dial(pair, cache).do(t)
		return err == nil
	}
	if !accepted(ours, nil) || accepted(theirs, nil) || accepted(nil, nil) {
		t.Fatal("at start: want our client accepted, the partner's and none refused")
	}

	at := time.Now().Add(time.Hour).Truncate(time.Second)
	writeFile(t, bundle, append(append([]byte{}, caPEM...), otherPEM...))
	stampFiles(t, at, bundle)
	if accepted(theirs, nil) {
		t.Fatal("the partner's client accepted before the next check")
	}
	clock.next()
	sessions := tls.NewLRUClientSessionCache(4)
	if !accepted(theirs, sessions) || !accepted(ours, nil) {
		t.Fatalf("after the check, a client of each CA: want both accepted:\n%s", logs.String())
	}
	if _, cs, err := dial(theirs, sessions).do(t); err != nil || !cs.DidResume {
		t.Fatalf("the partner's second connection: resumed %v, %v; want a resumed session", cs.DidResume, err)
	}

	// Cut short: the last good bundle goes on.
	writeFile(t, bundle, append(append([]byte{}, caPEM...), otherPEM[:len(otherPEM)/2]...))
	stampFiles(t, at.Add(time.Hour), bundle)
	clock.next()
	if !accepted(theirs, nil) || !accepted(ours, nil) {
		t.Fatal("after a bundle cut short: want the last good one, both clients accepted")
	}
	if !strings.Contains(logs.String(), "tls client CA bundle not reloaded") {
		t.Fatalf("the bundle cut short was not logged:\n%s", logs.String())
	}

	// The partner's CA is removed; the new bundle cannot be loaded at
	// first, then can, with the same stamp.
	at = at.Add(2 * time.Hour)
	writeFile(t, bundle, unreadable(caPEM))
	stampFiles(t, at, bundle)
	clock.next()
	if !accepted(theirs, nil) {
		t.Fatal("after a bundle that cannot be loaded: want the last good one, the partner accepted")
	}
	writeFile(t, bundle, caPEM)
	stampFiles(t, at, bundle)
	refused := !accepted(theirs, nil)
	for range 2 {
		if refused {
			break
		}
		clock.next()
		refused = !accepted(theirs, nil)
	}
	if !refused {
		t.Fatalf("the partner's client still accepted two checks after its CA was removed:\n%s", logs.String())
	}
	if accepted(theirs, sessions) || !accepted(ours, nil) {
		t.Fatal("after the removal: want the partner's resumed session refused and our client accepted")
	}
	if !strings.Contains(logs.String(), "tls client CA bundle reloaded") {
		t.Errorf("the reload was not logged:\n%s", logs.String())
	}
}

// TestLoadClientCAs: a bundle loads only whole.
func TestLoadClientCAs(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, dir, "idmint")
	good := readFile(t, ca.File)
	certFile, keyFile := ca.Issue(t, dir, "server", 1, true)
	for _, tc := range []struct {
		name string
		body []byte
		want string // "" loads
	}{
		{"one CA", good, ""},
		{"two, with space around", append(append(append([]byte("\n"), good...), good...), "\n\n"...), ""},
		{"empty", nil, "no PEM certificate"},
		{"cut short", good[:len(good)-30], "cut short"},
		{"a key in it", append(append([]byte{}, good...), readFile(t, keyFile)...), "want only certificates"},
		{"not a certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), "certificate 1"},
		{"with the server's certificate", append(append([]byte{}, good...), readFile(t, certFile)...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bundle.pem")
			writeFile(t, path, tc.body)
			_, err := loadClientCAs(path)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("loadClientCAs: %v, want %q", err, tc.want)
			}
		})
	}
}
