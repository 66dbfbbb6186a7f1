package testutil

import (
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/idmint/idmint/internal/devpki"
)

// CA is a certificate authority made for one test.
type CA struct {
	*devpki.CA
	// File is the CA certificate as a PEM file.
	File string
}

// NewCA makes a CA named name, its certificate written to dir.
func NewCA(tb testing.TB, dir, name string) *CA {
	tb.Helper()
	ca, err := devpki.NewCA(name, 24*time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	c := &CA{CA: ca, File: filepath.Join(dir, name+"-ca.pem")}
	if err := devpki.WriteFile(c.File, ca.PEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Issue signs a certificate with serial: for a server on 127.0.0.1, ::1 and
// localhost when server is true, for a client otherwise. It writes the
// certificate and its key to dir as name.pem and name-key.pem, replacing
// them atomically (by rename), and returns their paths.
func (ca *CA) Issue(tb testing.TB, dir, name string, serial int64, server bool) (certFile, keyFile string) {
	tb.Helper()
	use := devpki.Client
	if server {
		use = devpki.Server
	}
	certPEM, keyPEM, err := ca.IssueSerial(name, use, 24*time.Hour, big.NewInt(serial))
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := devpki.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := devpki.WriteFile(certFile, certPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}
