package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idmint/idmint/internal/devpki"
)

// devCertsDetail is dev-certs' text for --help and docs/cli.md.
const devCertsDetail = `It writes, into --dir: ca.pem (a new CA, whose key is kept nowhere, so
it can sign nothing more), server.pem and server-key.pem (for localhost,
127.0.0.1 and ::1), client.pem and client-key.pem (a client certificate for
--tls-client-ca); keys are mode 0600. It then prints the flags that serve,
curl and grpcurl take to use them. It refuses to replace files already
there unless --force. For trying TLS and mTLS on one machine, never for
production.`

// devCertFiles are the files dev-certs writes, in --dir.
var devCertFiles = []string{"ca.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"}

// devCertsFlags is `idmint dev-certs`.
func devCertsFlags(fs *flag.FlagSet) runFunc {
	dir := fs.String("dir", "dev-certs", "directory to write the certificates and keys to (made if missing)")
	validity := fs.Duration("valid-for", 30*24*time.Hour, "how long the certificates are valid")
	force := fs.Bool("force", false, "replace the files of an earlier run")
	return func(_ context.Context, out output, _ []string) error {
		if *validity <= 0 {
			return fmt.Errorf("--valid-for %s: want more than 0", *validity)
		}
		abs, err := filepath.Abs(*dir)
		if err != nil {
			return fmt.Errorf("dev-certs: %w", err)
		}
		if err := writeDevCerts(abs, *validity, *force); err != nil {
			return err
		}
		f := func(name string) string { return shellQuote(filepath.Join(abs, name)) }
		fmt.Fprintf(out.stdout, `wrote %s: %s

serve over TLS, asking every client for a certificate of this CA:
  idmint serve --listen 127.0.0.1:8443 --tag demo --tls-cert %s --tls-key %s --tls-client-ca %s

then ask it, with the client certificate:
  curl --cacert %s --cert %s --key %s 'https://localhost:8443/id?biz_tag=demo'
  go tool grpcurl -cacert %s -cert %s -key %s localhost:8443 list
  idmint healthcheck --listen 127.0.0.1:8443 --ca %s --cert %s --key %s

Leave out --tls-client-ca for TLS without client certificates (curl then needs only --cacert).
`, abs, strings.Join(devCertFiles, ", "),
			f("server.pem"), f("server-key.pem"), f("ca.pem"),
			f("ca.pem"), f("client.pem"), f("client-key.pem"),
			f("ca.pem"), f("client.pem"), f("client-key.pem"),
			f("ca.pem"), f("client.pem"), f("client-key.pem"))
		return nil
	}
}

// writeDevCerts makes a CA, a server and a client certificate, and writes
// them to dir.
func writeDevCerts(dir string, validity time.Duration, force bool) error {
	if !force {
		for _, name := range devCertFiles {
			_, err := os.Lstat(filepath.Join(dir, name))
			if err == nil {
				return fmt.Errorf("dev-certs: %s already exists: pass --force to replace the files in %s", filepath.Join(dir, name), dir)
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("dev-certs: %w", err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dev-certs: %w", err)
	}
	host, _ := os.Hostname()
	ca, err := devpki.NewCA("idmint dev CA "+host+" "+time.Now().UTC().Format(time.RFC3339), validity)
	if err != nil {
		return err
	}
	serverCert, serverKey, err := ca.Issue("localhost", devpki.Server, validity)
	if err != nil {
		return err
	}
	clientCert, clientKey, err := ca.Issue("idmint dev client", devpki.Client, validity)
	if err != nil {
		return err
	}
	// Keys first, certificates last: a serve reloading a pair never sees a
	// new certificate beside the old key for longer than one check.
	files := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{"server-key.pem", serverKey, 0o600},
		{"client-key.pem", clientKey, 0o600},
		{"ca.pem", ca.PEM, 0o644},
		{"server.pem", serverCert, 0o644},
		{"client.pem", clientCert, 0o644},
	}
	for _, f := range files {
		if err := devpki.WriteFile(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return fmt.Errorf("dev-certs: %w", err)
		}
	}
	return nil
}

// shellQuote quotes path for a POSIX shell when it holds anything but
// the characters a path usually has.
func shellQuote(path string) string {
	for _, r := range path {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '/' || r == '.' || r == '-' || r == '_') {
			return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
		}
	}
	return path
}
