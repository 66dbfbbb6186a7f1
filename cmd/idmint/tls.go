package main

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
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
	fs.StringVar(&c.clientCA, "tls-client-ca", "", "PEM CA bundle: every client must present a certificate it signed (mTLS; the certificate authenticates the connection, tokens still authorise); read again when the file changes, without a restart")
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
// --tls-cert. The key pair and the client CA bundle are loaded now, so that
// a bad one stops serve at start; afterwards they are read again when their
// files change, and at every check after a load failed (tlsReloader).
func (c *tlsServerConfig) serverTLS(logger *slog.Logger) (*tls.Config, error) {
	if c.cert == "" {
		return nil, nil
	}
	r, err := newTLSReloader(c.cert, c.key, c.clientCA, logger, time.Now)
	if err != nil {
		return nil, err
	}
	return r.serverConfig(), nil
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
