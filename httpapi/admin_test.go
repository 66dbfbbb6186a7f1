package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// TestAdmin_Tags: the admin API lists, shows, creates, changes and bumps
// tags, never lowers max_id, and a tag it creates is served by another
// instance on the same database without a restart; on PostgreSQL and SQLite.
func TestAdmin_Tags(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			a := newTokenInstance(t, store, httpapi.AuthConfig{}, httpapi.Limits{})
			b := newTokenInstance(t, store, httpapi.AuthConfig{}, httpapi.Limits{})
			_, admin := newToken(t, store, "ops", "admin")
			tag := func(status int, body []byte) wire.Tag {
				t.Helper()
				var tj wire.Tag
				if err := json.Unmarshal(body, &tj); err != nil {
					t.Fatalf("%d %s: %v", status, body, err)
				}
				return tj
			}

			// The other instance has read the catalog: the tag is unknown.
			if s, _, body := do(t, b.srv, "GET", "/id?biz_tag=invoice", "", nil); s != 404 {
				t.Fatalf("before create: %d %s", s, body)
			}
			s, _, body := do(t, a.srv, "POST", "/v1/tags", admin, map[string]any{"biz_tag": "invoice", "step": 10, "description": "invoices"})
			if got := tag(s, body); s != 201 || got != (wire.Tag{Tag: "invoice", MaxID: 0, Step: 10, MaxStep: 1_000_000, Description: "invoices"}) {
				t.Fatalf("create: %d %+v", s, got)
			}
			created := time.Now()
			testutil.Eventually(t, 10*time.Second, "the other instance serves the new tag", func() bool {
				s, _, _ := do(t, b.srv, "GET", "/id?biz_tag=invoice", "", nil)
				return s == 200
			})
			t.Logf("served by the other instance %v after its creation", time.Since(created).Round(time.Millisecond))

			for _, bad := range []struct {
				name   string
				body   any
				status int
				code   string
			}{
				{"exists", map[string]any{"biz_tag": "invoice"}, 409, wire.CodeTagExists},
				{"bad name", map[string]any{"biz_tag": "no way"}, 400, wire.CodeInvalidTag},
				{"bad step", map[string]any{"biz_tag": "x", "step": -1}, 400, wire.CodeInvalidSpec},
				// 0 is not "the default": a field given must mean what it says.
				{"step 0", map[string]any{"biz_tag": "x", "step": 0}, 400, wire.CodeInvalidSpec},
				{"max_step 0", map[string]any{"biz_tag": "x", "max_step": 0}, 400, wire.CodeInvalidSpec},
				{"unknown field", map[string]any{"biz_tag": "x", "color": "red"}, 400, wire.CodeInvalidJSON},
				{"not json", "just a string", 400, wire.CodeInvalidJSON},
			} {
				s, _, body := do(t, a.srv, "POST", "/v1/tags", admin, bad.body)
				if s != bad.status || errorCode(t, body) != bad.code {
					t.Errorf("%s: %d %s", bad.name, s, body)
				}
			}

			s, _, body = do(t, a.srv, "PATCH", "/v1/tags/invoice", admin, map[string]any{"step": 20, "max_step": 40, "description": "bills"})
			if got := tag(s, body); s != 200 || got.Step != 20 || got.MaxStep != 40 || got.Description != "bills" {
				t.Fatalf("patch: %d %+v", s, got)
			}
			s, _, body = do(t, a.srv, "POST", "/v1/tags/invoice/bump", admin, map[string]any{"to": 5000})
			if got := tag(s, body); s != 200 || got.MaxID != 5000 {
				t.Fatalf("bump: %d %+v", s, got)
			}
			s, _, body = do(t, a.srv, "POST", "/v1/tags/invoice/bump", admin, map[string]any{"to": 100})
			if s != 409 || errorCode(t, body) != wire.CodeNotRaised || !strings.Contains(string(body), "nothing changed") {
				t.Fatalf("bump below max_id: %d %s", s, body)
			}
			if s, _, body := do(t, a.srv, "POST", "/v1/tags/invoice/bump", admin, map[string]any{"to": 9000, "by": 5}); s != 400 {
				t.Fatalf("bump with to and by: %d %s", s, body)
			}
			s, _, body = do(t, a.srv, "GET", "/v1/tags/invoice", admin, nil)
			if got := tag(s, body); s != 200 || got.MaxID != 5000 || got.Step != 20 {
				t.Fatalf("show after a refused bump: %d %+v", s, got)
			}
			if s, _, body := do(t, a.srv, "GET", "/v1/tags/nope", admin, nil); s != 404 || errorCode(t, body) != wire.CodeUnknownTag {
				t.Fatalf("show unknown: %d %s", s, body)
			}
			if s, _, body := do(t, a.srv, "DELETE", "/v1/tags/invoice", admin, nil); s != 405 {
				t.Fatalf("delete: %d %s (tags are never deleted)", s, body)
			}
			s, _, body = do(t, a.srv, "GET", "/v1/tags", admin, nil)
			var list struct{ Tags []wire.Tag }
			if err := json.Unmarshal(body, &list); s != 200 || err != nil || len(list.Tags) != 1 || list.Tags[0].Tag != "invoice" {
				t.Fatalf("list: %d %s", s, body)
			}
			// The bumped tag's next segment starts above the bump, on the
			// instance that had loaded it before too.
			if _, _, body := do(t, b.srv, "GET", "/ids?biz_tag=invoice&count=20", "", nil); !strings.Contains(string(body), `"5001"`) {
				t.Logf("after the bump, instance b still serves its buffered range: %s", body)
			}
			if tags, err := store.Tags(context.Background()); err != nil || tags[0].MaxID < 5000 {
				t.Fatalf("max_id after bump: %+v, %v", tags, err)
			}
		})
	}
}
