package devpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// Use is what a certificate is issued for.
type Use int

const (
	// Client is a certificate a client presents (mTLS).
	Client Use = iota
	// Server is a certificate for a server on this machine: localhost,
	// 127.0.0.1 and ::1.
	Server
)

// backdate is how far before now a certificate starts being valid, so that
// a clock a little behind does not refuse it.
const backdate = time.Hour

// CA is a certificate authority: its certificate and its key.
type CA struct {
	Cert *x509.Certificate
	// PEM is Cert as a PEM block, what a client or serve's --tls-client-ca
	// is given.
	PEM []byte
	key *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid from now for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: ca key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devpki: ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: ca certificate: %w", err)
	}
	return &CA{Cert: cert, PEM: encode("CERTIFICATE", der), key: key}, nil
}

// Issue signs a certificate named name for use, valid from now for
// validity, with a random serial. It returns the certificate and its new
// key (PKCS #8), both as PEM.
func (ca *CA) Issue(name string, use Use, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	return ca.IssueSerial(name, use, validity, serial)
}

// IssueSerial is Issue with the serial given: tests that look for a
// certificate's serial in a log choose it.
func (ca *CA) IssueSerial(name string, use Use, validity time.Duration, serial *big.Int) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("devpki: key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if use == Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("devpki: certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("devpki: key: %w", err)
	}
	return encode("CERTIFICATE", der), encode("PRIVATE KEY", keyDER), nil
}

// WriteFile writes data to path with mode perm through a rename, so that a
// reader (serve reloading its key pair) never sees half a file, nor a key
// with a wider mode for a moment.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	os.Remove(tmp) // one left by a failed run would keep its mode
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("devpki: %w", err)
	}
	// The umask may have narrowed perm; a key is never widened by it.
	if err := os.Chmod(tmp, perm); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devpki: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devpki: %w", err)
	}
	return nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// randomSerial is a 128-bit serial: certificates made again under a CA of
// the same name never share one (browsers refuse a reused serial).
func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("devpki: serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
