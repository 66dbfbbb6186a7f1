package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// TestServer_BadBodies: every JSON endpoint answers a bad body with a 400
// that says, in plain words, which field is wrong and what it wants, never
// a Go type name or encoding/json's text; and nothing changes.
func TestServer_BadBodies(t *testing.T) {
	store := stores(t)["sqlite"](t)
	inst := newTokenInstance(t, store, httpapi.AuthConfig{}, httpapi.Limits{})
	_, admin := newToken(t, store, "ops", "admin")
	if s, _, body := do(t, inst.srv, "POST", "/v1/tags", admin, map[string]any{"biz_tag": "order", "step": 10}); s != 201 {
		t.Fatalf("create: %d %s", s, body)
	}
	send := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, inst.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	const (
		rid = `"request_id":"0190f3c4-7a8b-7cde-8f01-23456789abcd"`
		key = `"holder_key":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`
	)
	endpoints := []struct{ method, path, good string }{
		{"POST", "/v1/tags", `"biz_tag":"fresh"`},
		{"PATCH", "/v1/tags/order", `"description":"d"`},
		{"POST", "/v1/tags/order/bump", `"by":5`},
		{"POST", "/v1/segments", `"biz_tag":"order",` + rid + `,` + key},
		{"POST", "/v1/segments/giveback", `"biz_tag":"order",` + rid + `,` + key + `,"first":"1","last":"2"`},
	}
	// Bad bodies: syntax, shapes, every kind of wrong value for the
	// fields of the five bodies, unknown fields, trailing data. {good}
	// is the endpoint's good fields, so that one bad field is the problem.
	bodies := []string{
		``, ` `, `{`, `}`, `[]`, `[{}]`, `"x"`, `42`, `true`, `{"a"}`, `{,}`, `{good,}`, `{good} {good}`, `{good} x`,
		`{good,"step":"ten"}`, `{good,"step":1.5}`, `{good,"step":1e30}`, `{good,"step":true}`, `{good,"step":[]}`,
		`{good,"STEP":"x"}`, `{good,"max_step":{}}`, `{good,"start":"0"}`, `{good,"description":7}`, `{good,"biz_tag":5}`,
		`{good,"to":"x"}`, `{good,"by":-1.5}`, `{good,"size":"big"}`, `{good,"size":-1e99}`, `{good,"floor":12}`,
		`{good,"floor":"abc"}`, `{good,"first":1}`, `{good,"last":"x"}`, `{good,"request_id":7}`, `{good,"holder_key":false}`,
		`{good,"color":"red"}`, `{good,"":1}`, `{good,"step":"` + strings.Repeat("9", 400) + `"}`,
		strings.Repeat("[", 5000), "{good,\"description\":\"\xff\"}x",
	}
	for _, ep := range endpoints {
		for _, b := range bodies {
			body := strings.ReplaceAll(b, "good", ep.good)
			status, reply := send(ep.method, ep.path, body)
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(reply, &e); err != nil || status < 400 || status >= 500 || e.Error.Message == "" {
				// A body that is good after all (unknown keys ignored
				// nowhere, so only a null) would be a 2xx: none here is.
				t.Errorf("%s %s %.60q: %d %s", ep.method, ep.path, body, status, reply)
				continue
			}
			for _, bad := range []string{"httpapi.", "struct", "Go", "unmarshal", "int64", "json:", "reflect"} {
				if strings.Contains(e.Error.Message, bad) {
					t.Errorf("%s %s %.60q: the message %q says %q", ep.method, ep.path, body, e.Error.Message, bad)
				}
			}
		}
	}

	// The words for a few of them.
	for _, tt := range []struct{ method, path, body, want string }{
		{"POST", "/v1/tags", `{"biz_tag":"x","step":"ten"}`, "step: want a whole number"},
		{"PATCH", "/v1/tags/order", `{"max_step":1.5}`, "max_step: want a whole number"},
		{"PATCH", "/v1/tags/order", `{"description":7}`, "description: want a string"},
		{"POST", "/v1/tags", `{"biz_tag":"x","colour":1}`, "colour: no such field; the fields are biz_tag, step, max_step, start, description, runway_seconds"},
		{"PATCH", "/v1/tags/order", `{"runway_seconds":"30s"}`, "runway_seconds: want a number"},
		{"POST", "/v1/segments", `{"biz_tag":"order","floor":12}`, `floor: want a whole number as a decimal string, e.g. "42"`},
		{"POST", "/v1/tags/order/bump", `{"by":1} {"by":2}`, "body: want one JSON object and nothing after it"},
		{"POST", "/v1/tags", `[1]`, `body: want one JSON object, e.g. {"biz_tag": "order"}`},
	} {
		status, reply := send(tt.method, tt.path, tt.body)
		var e struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(reply, &e); status != 400 || e.Error.Message != tt.want {
			t.Errorf("%s %s %s: %d %s; want %q", tt.method, tt.path, tt.body, status, reply, tt.want)
		}
	}

	// Nothing changed: the one tag, as created, and no range granted.
	s, _, body := do(t, inst.srv, "GET", "/v1/tags", admin, nil)
	var list struct{ Tags []wire.Tag }
	if err := json.Unmarshal(body, &list); err != nil || s != 200 {
		t.Fatalf("list: %d %s", s, body)
	}
	if len(list.Tags) != 1 || list.Tags[0] != (wire.Tag{Tag: "order", Step: 10, MaxStep: 1_000_000}) {
		t.Fatalf("after the bad bodies: %+v", list.Tags)
	}
}

// TestServer_NotFound: GET / and any unknown path answer a JSON 404 that
// points a newcomer at the dashboard, the health document and the OpenAPI
// document.
func TestServer_NotFound(t *testing.T) {
	srv, _ := newServer(t)
	for _, path := range []string{"/", "/nope", "/id/", "/v1/nothing?x=1"} {
		status, _, body := getURL(t, srv.URL+path)
		if status != http.StatusNotFound || errorCode(t, body) != wire.CodeNotFound {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		for _, want := range []string{"no such endpoint", "/id/dashboard", "/id/health", "/openapi.yaml"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("GET %s: %s lacks %q", path, body, want)
			}
		}
	}
}

// TestServer_EncodedBodies: a JSON body with a Content-Encoding (a gzipped
// body, good once inflated) is refused with a 400 that says so, on every
// JSON endpoint, and nothing changes: the HTTP routes inflate nothing.
func TestServer_EncodedBodies(t *testing.T) {
	store := stores(t)["sqlite"](t)
	inst := newTokenInstance(t, store, httpapi.AuthConfig{}, httpapi.Limits{})
	_, admin := newToken(t, store, "ops", "admin")
	if s, _, body := do(t, inst.srv, "POST", "/v1/tags", admin, map[string]any{"biz_tag": "order", "step": 10}); s != 201 {
		t.Fatalf("create: %d %s", s, body)
	}
	const (
		rid = `"request_id":"0190f3c4-7a8b-7cde-8f01-23456789abcd"`
		key = `"holder_key":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`
	)
	for _, ep := range []struct{ method, path, body string }{
		{"POST", "/v1/tags", `{"biz_tag":"fresh"}`},
		{"PATCH", "/v1/tags/order", `{"description":"d"}`},
		{"POST", "/v1/tags/order/bump", `{"by":5}`},
		{"POST", "/v1/segments", `{"biz_tag":"order",` + rid + `,` + key + `}`},
		{"POST", "/v1/tokens", `{"name":"x","scopes":["ids"]}`},
	} {
		for _, enc := range []string{"gzip", "deflate", "GZIP", "identity, gzip"} {
			var gz bytes.Buffer
			w := gzip.NewWriter(&gz)
			w.Write([]byte(ep.body))
			w.Close()
			req, err := http.NewRequest(ep.method, inst.srv.URL+ep.path, &gz)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+admin)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", enc)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			reply, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			if json.Unmarshal(reply, &e); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "Content-Encoding") {
				t.Errorf("%s %s, Content-Encoding %s: %d %s; want 400 naming Content-Encoding", ep.method, ep.path, enc, resp.StatusCode, reply)
			}
		}
	}
	s, _, body := do(t, inst.srv, "GET", "/v1/tags", admin, nil)
	var list struct{ Tags []wire.Tag }
	if err := json.Unmarshal(body, &list); err != nil || s != 200 {
		t.Fatalf("list: %d %s", s, body)
	}
	if len(list.Tags) != 1 || list.Tags[0] != (wire.Tag{Tag: "order", Step: 10, MaxStep: 1_000_000}) {
		t.Fatalf("after the encoded bodies: %+v", list.Tags)
	}
}
