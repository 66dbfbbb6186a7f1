package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idmint/idmint/wire"
)

// FuzzDecodeBody: whatever the body, decodeBody does not panic, and a
// refusal says what is wrong in plain words: no Go type name, none of
// encoding/json's text.
func FuzzDecodeBody(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"biz_tag":"a","step":"x"}`, `{"floor":1}`, `{"first":"1","last":"x"}`, `[`, `{"step":1}{}`,
		`{"STEP":1.5}`, `{"description":{"a":1}}`, `{"x":1}`, "{\"biz_tag\":\"\xff\"}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, dst := range []any{&wire.CreateTagRequest{}, &wire.PatchTagRequest{}, &wire.BumpRequest{}, &wire.SegmentRequest{}, &wire.GiveBackRequest{}} {
			r := httptest.NewRequest("POST", "/v1/tags", strings.NewReader(body))
			err := decodeBody(httptest.NewRecorder(), r, 1<<10, dst)
			if err == nil {
				continue
			}
			msg := err.Error()
			if name, rest, ok := strings.Cut(msg, ": no such field"); ok && len(name) > 0 {
				msg = rest // the name is the body's own, quoted back
			}
			for _, bad := range []string{"httpapi.", "struct", "Go ", "unmarshal", "int64", "json:", "reflect"} {
				if strings.Contains(msg, bad) {
					t.Fatalf("%q into %T: %q says %q", body, dst, err, bad)
				}
			}
		}
	})
}
