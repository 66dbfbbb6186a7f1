package redact

import (
	"net"
	"regexp"
	"sort"
	"strings"
)

// Placeholder stands where a detail was taken out.
const Placeholder = "[redacted]"

// The shapes String takes out, in the order it applies them: a URL or a
// key=value pair before the addresses they hold, pgx's "ADDR (HOST)" before
// a bare ADDR.
var (
	url      = regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://[^\s"'` + "`" + `]+`)
	keyValue = regexp.MustCompile(`\b(user|username|database|dbname|host|hostaddr|port|password|passfile|sslpassword|sslkey|sslcert|sslrootcert|service)=("[^"]*"|'[^']*'|[^\s` + "`" + `,;)]+)`)
	// lookup is a *net.DNSError: "lookup NAME on SERVER: ERR" or "lookup NAME: ERR".
	lookup = regexp.MustCompile(`\blookup \S+?(?: on \S+?)?(: |$)`)
	// address is a *net.AddrError: "address ADDR: ERR".
	address = regexp.MustCompile(`\baddress \S+?: `)
	// certNames are the names of a TLS certificate that does not match.
	certNames = regexp.MustCompile(`(certificate is valid for ).*?(, not )\S+|(but wanted to match )\S+`)
	// quoted are the names PostgreSQL's messages quote: `password
	// authentication failed for user "app"`, `database "orders" does not
	// exist`, `no pg_hba.conf entry for host "10.0.0.5", user "app"`.
	quoted = regexp.MustCompile(`\b(user|role|database|host|server) "(?:[^"]|"")*"`)
	// hostPort is HOST:PORT with HOST an IPv6 address in brackets, an IPv4
	// address or a DNS name, optionally followed by pgx's " (HOST)". A match
	// followed by ":DIGIT" is a time of day, not an address (see scrubHostPorts).
	hostPort = regexp.MustCompile(`(?:\[[0-9A-Za-z:.%]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*):[0-9]{1,5}\b(?: \([^()\s]+\))?`)
	ipv6     = regexp.MustCompile(`[0-9A-Fa-f:]*::[0-9A-Fa-f:.]*(?:%[A-Za-z0-9]+)?|\b(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}\b`)
	ipv4     = regexp.MustCompile(`\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b`)
	// paren is a dotted host name in parentheses, as pgx writes the host
	// it was given ("(db.internal)"); one with no letter is a number.
	paren = regexp.MustCompile(`\([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\)`)
)

// String returns s with every connection detail it recognises by its shape
// replaced by Placeholder; the rest of the message is kept.
func String(s string) string {
	if s == "" {
		return s
	}
	s = url.ReplaceAllString(s, Placeholder)
	s = keyValue.ReplaceAllString(s, "${1}="+Placeholder)
	s = lookup.ReplaceAllString(s, "lookup "+Placeholder+"${1}")
	s = address.ReplaceAllString(s, "address "+Placeholder+": ")
	s = certNames.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "but wanted") {
			return "but wanted to match " + Placeholder
		}
		return "certificate is valid for " + Placeholder + ", not " + Placeholder
	})
	s = quoted.ReplaceAllString(s, `${1} "`+Placeholder+`"`)
	s = scrubHostPorts(s)
	s = ipv6.ReplaceAllStringFunc(s, func(m string) string {
		if m == "::" { // not an address: Go's and C++'s scope operator
			return m
		}
		return Placeholder
	})
	s = ipv4.ReplaceAllString(s, Placeholder)
	s = paren.ReplaceAllStringFunc(s, func(m string) string {
		if !strings.ContainsAny(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			return m
		}
		return "(" + Placeholder + ")"
	})
	return s
}

// scrubHostPorts replaces each HOST:PORT, except those that are a time of
// day ("12:30:45", "T12:30:45Z").
func scrubHostPorts(s string) string {
	idx := hostPort.FindAllStringIndex(s, -1)
	if idx == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range idx {
		if end := m[1]; end+1 < len(s) && s[end] == ':' && s[end+1] >= '0' && s[end+1] <= '9' {
			continue
		}
		b.WriteString(s[last:m[0]])
		b.WriteString(Placeholder)
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// Error returns err's text with its connection details taken out: those
// its pgx and net errors carry, wherever they appear in the text, then
// those String finds by their shape. It returns "" for a nil err.
func Error(err error) string {
	if err == nil {
		return ""
	}
	return replaceWords(String(err.Error()), secrets(err))
}

// secrets returns the details that the errors in err's tree carry, longest
// first so that a host name goes before a shorter name it contains.
// finders are the secret finders of drivers (AddSecrets), each asked
// about every error of a chain.
var finders []func(error) []string

// AddSecrets adds f, which returns what of one error (not its chain) is a
// secret: a driver's connect error knows its user, password, database and
// hosts (internal/redact/pgsecrets adds pgconn's). Call it from an init
// function: the list is read without a lock.
func AddSecrets(f func(error) []string) { finders = append(finders, f) }

func secrets(err error) []string {
	var out []string
	add := func(ss ...string) {
		for _, s := range ss {
			if s != "" && s != Placeholder {
				out = append(out, s)
			}
		}
	}
	addAddr := func(a net.Addr) {
		if a == nil {
			return
		}
		add(a.String())
		if host, _, err := net.SplitHostPort(a.String()); err == nil {
			add(host)
		}
	}
	walk(err, func(e error) {
		for _, f := range finders {
			add(f(e)...)
		}
		switch e := e.(type) {
		case *net.DNSError:
			add(e.Name, e.Server)
		case *net.OpError:
			addAddr(e.Addr)
			addAddr(e.Source)
		case *net.AddrError:
			add(e.Addr)
		}
	})
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// walk calls visit on err and every error it wraps, depth first; bounded,
// so that a cyclic chain cannot hang it.
func walk(err error, visit func(error)) {
	const maxErrors = 256
	stack, seen := []error{err}, 0
	for len(stack) > 0 && seen < maxErrors {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		seen++
		visit(e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, u.Unwrap())
		case interface{ Unwrap() []error }:
			stack = append(stack, u.Unwrap()...)
		}
	}
}

// replaceWords replaces each secret in s where it stands as a whole word
// (not inside a longer name), so that a user called "id" leaves "idmint"
// alone.
func replaceWords(s string, secrets []string) string {
	for _, w := range secrets {
		var b strings.Builder
		rest := s
		for {
			i := strings.Index(rest, w)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			end := i + len(w)
			if (i > 0 && wordByte(rest[i-1])) || (end < len(rest) && wordByte(rest[end])) {
				b.WriteString(rest[:end])
			} else {
				b.WriteString(rest[:i])
				b.WriteString(Placeholder)
			}
			rest = rest[end:]
		}
		s = b.String()
	}
	return s
}

func wordByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
