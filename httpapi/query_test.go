package httpapi

import (
	"net/url"
	"testing"
)

// FuzzQueryParam checks queryParam against url.ParseQuery: the same first
// value and the same count for every key, whatever the query.
func FuzzQueryParam(f *testing.F) {
	for _, seed := range []string{
		"biz_tag=order", "biz_tag=a&biz_tag=b", "biz_tag=", "biz_tag", "&&biz_tag=x&", "biz%5Ftag=x",
		"biz_tag=a%2Bb+c", "biz_tag=%zz&biz_tag=ok", "biz_tag=a;b&biz_tag=c", "count=5&format=ranges", "=x", "biz_tag==",
	} {
		f.Add(seed, "biz_tag")
	}
	f.Add("count=1&count=2", "count")
	f.Fuzz(func(t *testing.T, raw, key string) {
		want, _ := url.ParseQuery(raw)
		got, n := queryParam(raw, key)
		if n != len(want[key]) {
			t.Fatalf("queryParam(%q, %q): %d values, ParseQuery %d", raw, key, n, len(want[key]))
		}
		if n > 0 && got != want[key][0] {
			t.Fatalf("queryParam(%q, %q) = %q, ParseQuery %q", raw, key, got, want[key][0])
		}
	})
}
