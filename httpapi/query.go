package httpapi

import (
	"net/url"
	"strings"
)

// queryParam returns the first value of key in the raw query and how many
// times key occurs, as url.ParseQuery(raw)[key] would, without building the
// map: the ID routes read one or three parameters, and the map costs more
// than the ID. Like ParseQuery it skips pairs that hold a semicolon or a
// malformed escape.
func queryParam(raw, key string) (value string, n int) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, ok := unescape(k)
		if !ok || k != key {
			continue
		}
		if v, ok = unescape(v); !ok {
			continue
		}
		if n == 0 {
			value = v
		}
		n++
	}
	return value, n
}

// unescape decodes a query component, copying only when it holds an escape.
func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, true
	}
	u, err := url.QueryUnescape(s)
	return u, err == nil
}
