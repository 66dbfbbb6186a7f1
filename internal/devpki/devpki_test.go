package devpki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCA_Issue: the server certificate verifies under the CA for
// localhost, 127.0.0.1 and ::1 as a server and not as a client; the client
// certificate the other way round; two issues never share a serial; each
// key is its certificate's.
func TestCA_Issue(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	serverPEM, serverKey, err := ca.Issue("localhost", Server, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientPEM, clientKey, err := ca.Issue("client", Client, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, client := parse(t, serverPEM), parse(t, clientPEM)
	for _, host := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the server certificate verifies as a client's")
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the client certificate verifies as a server's")
	}
	if server.SerialNumber.Cmp(client.SerialNumber) == 0 {
		t.Errorf("both certificates have serial %v", server.SerialNumber)
	}
	if _, err := tls.X509KeyPair(serverPEM, serverKey); err != nil {
		t.Errorf("server pair: %v", err)
	}
	if _, err := tls.X509KeyPair(clientPEM, clientKey); err != nil {
		t.Errorf("client pair: %v", err)
	}
}

// TestWriteFile: the mode asked for, whatever a file already there had.
func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte("left over"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %q, mode %v; want \"new\", 0600", path, b, fi.Mode().Perm())
	}
}

func parse(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
