// Package redact removes connection details (user, database, host, port,
// addresses) from error text before it reaches a log line or a reply:
//
//	redact.String("failed to connect to `user=idmint database=idmint`: 10.0.0.5:5432 (db.internal): dial error")
//	// "failed to connect to `user=… database=…`: …:… (…): dial error"
package redact

import "regexp"

var (
	keyValue = regexp.MustCompile(`\b(user|database|dbname|host|hostaddr|port|password|sslkey|sslcert)=("[^"]*"|'[^']*'|[^\s` + "`" + `,)]+)`)
	url      = regexp.MustCompile(`\b[a-z][a-z0-9+.-]*://[^\s"'` + "`" + `]+`)
	hostPort = regexp.MustCompile(`(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5}\b`)
	paren    = regexp.MustCompile(`\((\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9][A-Za-z0-9.-]*\.[A-Za-z0-9.-]+)\)`)
)

// String returns s with connection details replaced by "…".
func String(s string) string {
	s = url.ReplaceAllString(s, "…")
	s = keyValue.ReplaceAllString(s, "$1=…")
	s = hostPort.ReplaceAllString(s, "…:…")
	s = paren.ReplaceAllString(s, "(…)")
	return s
}
