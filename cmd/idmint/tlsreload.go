package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// certCheckEvery is how often a handshake may look at the TLS files.
const certCheckEvery = time.Second

// tlsReloader serves the listener's key pair and client CA bundle from
// their files. The first handshake at least certCheckEvery after the last
// look stats the files, and reads again each set whose files differ (by
// modification time or size) from when it last loaded well. Only a good
// load is remembered: a set that failed to load is read again at every
// check until it loads, whether or not its files change meanwhile, since a
// renewal can be caught half-done in a way that leaves no mark on the
// files (a key copied, then made readable by chown or chmod). Until then
// the last good pair and bundle are served, and open connections are never
// touched.
//
// Every handshake gets its configuration from GetConfigForClient: the
// bundle lives in tls.Config.ClientCAs, which a running server cannot
// change, so a new configuration is built (never an old one changed) when
// either set loads anew.
type tlsReloader struct {
	logger *slog.Logger
	now    func() time.Time
	base   *tls.Config // what every handshake's configuration starts from

	mu      sync.Mutex // protects the fields below
	pair    watched[*tls.Certificate]
	cas     watched[*x509.CertPool] // no files without --tls-client-ca
	checked time.Time
	config  *tls.Config // the handshakes' configuration
}

// newTLSReloader loads the pair (and the bundle, when caFile is not empty)
// now: any error is returned, for serve to stop at start.
func newTLSReloader(certFile, keyFile, caFile string, logger *slog.Logger, now func() time.Time) (*tlsReloader, error) {
	r := &tlsReloader{logger: logger, now: now, base: &tls.Config{
		// TLS 1.0 and 1.1 are deprecated (RFC 8996).
		MinVersion: tls.VersionTLS12,
		// The handshake's configuration replaces the server's, ALPN
		// included: name serverProtocols' protocols over TLS here.
		NextProtos: []string{"h2", "http/1.1"},
	}}
	r.pair = watched[*tls.Certificate]{what: "tls certificate", paths: []string{certFile, keyFile},
		read: func() (*tls.Certificate, error) { return loadKeyPair(certFile, keyFile) }}
	if caFile != "" {
		r.cas = watched[*x509.CertPool]{what: "tls client CA bundle", paths: []string{caFile},
			read: func() (*x509.CertPool, error) { return loadClientCAs(caFile) }}
		// Required, not verified-if-given: certificates map to no scope,
		// so one that is only checked when offered would protect nothing.
		r.base.ClientAuth = tls.RequireAndVerifyClientCert
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = now()
	for _, err := range []error{r.pair.refresh(), r.cas.refresh()} {
		if err != nil {
			return nil, err
		}
	}
	r.buildLocked()
	return r, nil
}

// serverConfig is the listener's tls.Config: each handshake asks r for
// its own.
func (r *tlsReloader) serverConfig() *tls.Config {
	cfg := r.base.Clone()
	cfg.GetConfigForClient = r.configForClient
	return cfg
}

// configForClient is tls.Config.GetConfigForClient.
func (r *tlsReloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		r.checkLocked()
	}
	return r.config, nil
}

// checkLocked reads again what changed or failed last time, logs what
// happened, and builds the handshakes' configuration anew if anything
// loaded.
func (r *tlsReloader) checkLocked() {
	changed := false
	if r.pair.reload(r.logger, "serving the last good one") {
		changed = true
		leaf := r.pair.value.Leaf
		r.logger.Info("tls certificate reloaded", "file", r.pair.paths[0], "serial", leaf.SerialNumber.String(),
			"not_after", leaf.NotAfter.UTC())
	}
	if r.cas.reload(r.logger, "verifying client certificates with the last good one") {
		changed = true
		r.logger.Info("tls client CA bundle reloaded", "file", r.cas.paths[0])
	}
	if changed {
		r.buildLocked()
	}
}

func (r *tlsReloader) buildLocked() {
	cfg := r.base.Clone()
	cfg.Certificates = []tls.Certificate{*r.pair.value}
	cfg.ClientCAs = r.cas.value
	r.config = cfg
}

// watched is a value loaded from files, loaded again when they change or
// when the last load failed.
type watched[T any] struct {
	what  string // for errors and the log
	paths []string
	read  func() (T, error)

	value   T           // the last good load
	stamps  []fileStamp // of the files, taken before the last good load
	failing string      // the error of the last load, if it failed: logged once
}

// fileStamp is what tells a changed file without reading it.
type fileStamp struct {
	mtime int64 // nanoseconds since the epoch
	size  int64
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{st.ModTime().UnixNano(), st.Size()}, nil
}

// refresh loads the files unless they are as they were before the last
// good load; on an error the last good value is kept. Without paths it
// does nothing.
func (w *watched[T]) refresh() error {
	if len(w.paths) == 0 {
		return nil
	}
	stamps := make([]fileStamp, len(w.paths))
	for i, path := range w.paths {
		s, err := stampOf(path)
		if err != nil {
			return fmt.Errorf("%s: %w", w.what, err)
		}
		stamps[i] = s
	}
	if w.stamps != nil && slices.Equal(stamps, w.stamps) {
		return nil
	}
	v, err := w.read()
	if err != nil {
		return err
	}
	// Stamped only now: a load that failed is tried again at the next
	// check even if the files keep these stamps.
	w.value, w.stamps = v, stamps
	return nil
}

// reload refreshes w and reports whether a new value loaded. A failure is
// logged when it differs from the one before, so that a set that stays
// broken, tried at every check, is logged once; keep says what is served
// meanwhile.
func (w *watched[T]) reload(logger *slog.Logger, keep string) bool {
	before := w.stamps
	err := w.refresh()
	if err != nil {
		if msg := err.Error(); msg != w.failing {
			w.failing = msg
			logger.Error(w.what+" not reloaded; "+keep, "err", err)
		}
		return false
	}
	w.failing = ""
	return !slices.Equal(before, w.stamps)
}

// loadKeyPair reads a PEM certificate chain and its key.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls key pair %s, %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls certificate %s: %w", certFile, err)
		}
	}
	return &cert, nil
}

// loadClientCAs reads a PEM CA bundle strictly: every block a certificate
// that parses, nothing else in the file but space, at least one. A bundle
// caught half-written fails to load, so that the last good one is kept,
// instead of loading as the CAs before the cut.
func loadClientCAs(path string) (*x509.CertPool, error) {
	rest, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls client CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("tls client CA bundle %s: a %s block; want only certificates", path, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls client CA bundle %s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	switch {
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, fmt.Errorf("tls client CA bundle %s: not PEM after certificate %d (cut short?)", path, n)
	case n == 0:
		return nil, fmt.Errorf("tls client CA bundle %s: no PEM certificate in it", path)
	}
	return pool, nil
}
