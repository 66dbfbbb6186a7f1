package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
)

// tlsServerConfig holds serve's TLS flags.
type tlsServerConfig struct {
	cert, key string
	clientCA  string
}

func (c *tlsServerConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.cert, "tls-cert", "", "PEM certificate chain to serve HTTPS with (with --tls-key); read again when the file changes, without a restart")
	fs.StringVar(&c.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.clientCA, "tls-client-ca", "", "PEM CA bundle: every client must present a certificate it signed (mTLS; the certificate authenticates the connection, tokens still authorise); read at start")
}

// validate checks the flags go together, before anything is opened.
func (c *tlsServerConfig) validate() error {
	switch {
	case (c.cert == "") != (c.key == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case c.clientCA != "" && c.cert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are asked for in the TLS handshake")
	}
	return nil
}

// health is what /id/health says of the listener.
func (c *tlsServerConfig) health() httpapi.TLSHealth {
	h := httpapi.TLSHealth{Enabled: c.cert != "", ClientCertificates: "off"}
	if c.clientCA != "" {
		h.ClientCertificates = "required"
	}
	return h
}

// serverTLS returns the listener's TLS configuration, or nil without
// --tls-cert. The key pair is loaded now, so that a bad one stops serve at
// start; afterwards it is read again when its files change.
func (c *tlsServerConfig) serverTLS(logger *slog.Logger) (*tls.Config, error) {
	if c.cert == "" {
		return nil, nil
	}
	r := &certReloader{certFile: c.cert, keyFile: c.key, logger: logger, now: time.Now}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		// TLS 1.0 and 1.1 are deprecated (RFC 8996).
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.getCertificate,
	}
	if c.clientCA != "" {
		pool, err := client.LoadCertPool(c.clientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		// Required, not verified-if-given: certificates map to no scope,
		// so one that is only checked when offered would protect nothing.
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certCheckEvery is how often a handshake may look at the key pair's files.
const certCheckEvery = time.Second

// certReloader serves a key pair from files, read again by the first
// handshake after they changed (by modification time or size, looked at
// most once per certCheckEvery). A pair that fails to load is logged and the
// last good one kept: a half-written renewal never stops the service, and
// open connections are never touched.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	now               func() time.Time

	mu      sync.Mutex // protects the fields below
	cert    *tls.Certificate
	stamp   [2]fileStamp // of the files as last loaded or tried
	checked time.Time
}

// fileStamp is what tells a changed file without reading it.
type fileStamp struct {
	mtime time.Time
	size  int64
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{st.ModTime(), st.Size()}, nil
}

// load reads the pair at start; any error is fatal.
func (r *certReloader) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = r.now()
	return r.reloadLocked()
}

// reloadLocked reads the pair if its files changed since the last try.
func (r *certReloader) reloadLocked() error {
	var stamp [2]fileStamp
	for i, path := range []string{r.certFile, r.keyFile} {
		s, err := stampOf(path)
		if err != nil {
			return fmt.Errorf("tls key pair: %w", err)
		}
		stamp[i] = s
	}
	if r.cert != nil && stamp == r.stamp {
		return nil
	}
	r.stamp = stamp
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls key pair %s, %s: %w", r.certFile, r.keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("tls certificate %s: %w", r.certFile, err)
		}
	}
	if r.cert != nil {
		r.logger.Info("tls certificate reloaded", "file", r.certFile, "serial", cert.Leaf.SerialNumber.String(),
			"not_after", cert.Leaf.NotAfter.UTC())
	}
	r.cert = &cert
	return nil
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		if err := r.reloadLocked(); err != nil {
			r.logger.Error("tls certificate not reloaded; serving the last good one", "err", err)
		}
	}
	return r.cert, nil
}

// serverProtocols are the listener's protocols: HTTP/1.1, HTTP/2 over TLS,
// and HTTP/2 in cleartext (h2c, with prior knowledge) for gRPC clients on a
// plain listener, all on the one port.
func serverProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// tlsClientFlags are the TLS flags of the commands that talk to a running
// instance (--server, healthcheck).
type tlsClientFlags struct {
	ca, cert, key string
	// pin is serve's own certificate file, for healthcheck (registerPin).
	pin string
}

func (f *tlsClientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "ca", "", "PEM CA bundle to verify the server's certificate with (default: the system's)")
	fs.StringVar(&f.cert, "cert", "", "PEM client certificate, for a server with --tls-client-ca (with --key)")
	fs.StringVar(&f.key, "key", "", "PEM private key of --cert")
}

// registerPin adds --tls-cert, serve's own flag: a health check in serve's
// container (IDMINT_TLS_CERT set) then speaks TLS without being told.
func (f *tlsClientFlags) registerPin(fs *flag.FlagSet) {
	fs.StringVar(&f.pin, "tls-cert", "", "serve's certificate (the same flag and IDMINT_TLS_CERT as serve): check over https, trusting exactly this certificate whatever name it was issued to (unless --ca is given)")
}

// set reports whether any TLS flag is given.
func (f *tlsClientFlags) set() bool { return f.ca != "" || f.cert != "" || f.key != "" || f.pin != "" }

// pinTo makes cfg trust exactly the first certificate in the PEM file
// path, instead of a CA and a name: the health check asks for 127.0.0.1,
// which serve's certificate need not name.
func pinTo(cfg *tls.Config, path string) error {
	pair, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	block, _ := pem.Decode(pair)
	if block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("--tls-cert %s: no PEM certificate in it", path)
	}
	pinned := block.Bytes
	cfg.InsecureSkipVerify = true // replaced by the comparison below
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pinned) {
			return errors.New("the server's certificate is not the one in --tls-cert")
		}
		return nil
	}
	return nil
}

// httpClient returns an HTTP client with these settings.
func (f *tlsClientFlags) httpClient(timeout time.Duration) (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if f.set() {
		cfg, err := client.LoadTLS(f.ca, f.cert, f.key)
		if err != nil {
			return nil, err
		}
		if f.pin != "" && f.ca == "" {
			if err := pinTo(cfg, f.pin); err != nil {
				return nil, err
			}
		}
		t.TLSClientConfig = cfg
	}
	return &http.Client{Timeout: timeout, Transport: t}, nil
}
