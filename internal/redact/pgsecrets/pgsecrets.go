// Package pgsecrets teaches internal/redact the secrets of a pgconn
// connect error (user, password, database, hosts and ports): every package
// that connects to PostgreSQL imports it, so that the API, which knows no
// store, redacts them all the same.
package pgsecrets

import (
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idmint/idmint/internal/redact"
)

func init() { redact.AddSecrets(secrets) }

func secrets(err error) []string {
	e, ok := err.(*pgconn.ConnectError)
	if !ok || e.Config == nil {
		return nil
	}
	c := e.Config
	out := []string{c.User, c.Password, c.Database, c.Host}
	if c.Port != 0 {
		out = append(out, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))))
	}
	for _, f := range c.Fallbacks {
		if f != nil {
			out = append(out, f.Host, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
		}
	}
	return out
}
