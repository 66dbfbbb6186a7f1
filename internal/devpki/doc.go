// Package devpki makes a small certificate authority and the certificates
// it signs, for trying TLS and client certificates on one machine
// (`idmint dev-certs`) and for the tests: never for production, where a
// real CA (cert-manager, an internal PKI) issues them.
//
//	ca, _ := devpki.NewCA("idmint dev CA", 30*24*time.Hour)
//	cert, key, _ := ca.Issue("localhost", devpki.Server, 30*24*time.Hour)
//	devpki.WriteFile("server-key.pem", key, 0o600) // through a rename
package devpki
