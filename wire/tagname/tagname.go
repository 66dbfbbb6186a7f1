package tagname

import "regexp"

var pattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// Valid reports whether name is a valid tag: 1 to 64 characters of
// letters, digits, '_', '.', ':' and '-', starting with a letter or digit.
func Valid(name string) bool { return pattern.MatchString(name) }

// Truncate shortens s to at most n bytes for messages, marking the cut: a
// name quoted in an error must not carry a caller's megabyte along.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
