package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/wire"
)

// Every reply the HTTP tests of this package receive over a client goes
// through validating, which checks it against the OpenAPI document; TestMain
// fails the run if any did not match.
var (
	specOnce   sync.Once
	specRouter routers.Router
	specDoc    *openapi3.T
	specErr    error

	violationsMu sync.Mutex
	violations   []string
)

func spec() (routers.Router, error) {
	specOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
		doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI)
		if err != nil {
			specErr = fmt.Errorf("load openapi.yaml: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = fmt.Errorf("openapi.yaml is invalid: %w", err)
			return
		}
		specDoc = doc
		specRouter, specErr = legacy.NewRouter(doc)
	})
	return specRouter, specErr
}

// checkReply validates one reply against the document. A route the
// document does not describe is a violation: the only replies allowed
// outside it are the router's own 404 not_found (no such path) and 405
// method_not_allowed (a documented path, another method), as JSON errors.
func checkReply(req *http.Request, status int, header http.Header, body []byte) error {
	router, err := spec()
	if err != nil {
		return err
	}
	u := *req.URL
	u.Host, u.Scheme = "", ""
	r2 := req.Clone(context.Background())
	r2.URL = &u
	route, params, err := router.FindRoute(r2)
	if err != nil {
		return checkUnrouted(err, status, body)
	}
	return openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: r2, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
}

// checkUnrouted accepts a reply to a request the document has no operation
// for only when it is the router's own refusal: a JSON error, 404 not_found
// or 405 method_not_allowed. (The legacy router reports a templated path
// with another method as not found, so either is accepted for either.)
func checkUnrouted(routeErr error, status int, body []byte) error {
	var reply struct {
		Error struct{ Code string } `json:"error"`
	}
	refusal := (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) &&
		json.Unmarshal(body, &reply) == nil &&
		reply.Error.Code == map[int]string{http.StatusNotFound: wire.CodeNotFound, http.StatusMethodNotAllowed: wire.CodeMethod}[status]
	if !refusal {
		return fmt.Errorf("route not in openapi.yaml (%v): every route must be documented", routeErr)
	}
	var v any
	json.Unmarshal(body, &v)
	return specDoc.Components.Schemas["Error"].Value.VisitJSON(v)
}

// validating wraps a transport: every reply is checked and kept readable.
type validating struct{ next http.RoundTripper }

func (v validating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, nil // the test reading it sees the short body
	}
	if err := checkReply(req, resp.StatusCode, resp.Header, body); err != nil {
		violationsMu.Lock()
		violations = append(violations, fmt.Sprintf("%s %s → %d: %v\n  body: %.300s", req.Method, req.URL.RequestURI(), resp.StatusCode, err, body))
		violationsMu.Unlock()
	}
	return resp, nil
}

// validated makes srv's client check every reply.
func validated(srv *httptest.Server) *httptest.Server {
	c := srv.Client()
	c.Transport = validating{next: c.Transport}
	return srv
}

// reportViolations prints the replies that did not match the document and
// returns the exit code of the run.
func reportViolations(code int) int {
	violationsMu.Lock()
	defer violationsMu.Unlock()
	if len(violations) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "FAIL: %d replies do not match openapi.yaml:\n%s\n", len(violations), strings.Join(violations, "\n"))
	return 1
}

// TestOpenAPI_Validator: the document is valid, served, and the check has
// teeth: replies that break it are caught.
func TestOpenAPI_Validator(t *testing.T) {
	if _, err := spec(); err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t)
	status, hdr, body := get(t, srv, "/openapi.yaml")
	if status != 200 || !bytes.Equal(body, httpapi.OpenAPI) || hdr.Get("Content-Type") != "application/yaml" {
		t.Fatalf("/openapi.yaml: %d %s", status, hdr.Get("Content-Type"))
	}
	json := http.Header{"Content-Type": {"application/json"}}
	bad := []struct {
		name, method, path string
		status             int
		body               string
	}{
		{"undocumented route", "GET", "/v1/secret", 200, `{"x":1}`},
		{"undocumented method", "DELETE", "/v1/tags/order", 200, `{}`},
		{"unknown path answered with another code", "GET", "/nope", 404, `{"error":{"code":"unknown_tag","message":"x"}}`},
		{"segment without recovered", "POST", "/v1/segments", 200, `{"biz_tag":"order","request_id":"0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a","first":"1","last":"10","step":10,"max_step":100}`},
		{"segment first as a number", "POST", "/v1/segments", 200, `{"biz_tag":"order","request_id":"0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a","first":1,"last":"10","step":10,"max_step":100,"recovered":false}`},
		{"give back without given_back", "POST", "/v1/segments/giveback", 200, `{"biz_tag":"order","request_id":"0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a","first":"1","last":"10"}`},
		{"id as a number", "GET", "/id?biz_tag=order", 200, `{"biz_tag":"order","id":5}`},
		{"extra field", "GET", "/id?biz_tag=order", 200, `{"biz_tag":"order","id":"5","x":1}`},
		{"error without code", "GET", "/id?biz_tag=order", 404, `{"error":{"message":"x"}}`},
		{"unknown error code", "GET", "/ids?biz_tag=order&count=1", 400, `{"error":{"code":"oops","message":"x"}}`},
		{"empty ids", "GET", "/ids?biz_tag=order&count=1", 200, `{"biz_tag":"order","ids":[]}`},
		{"tag max_id as a number", "GET", "/v1/tags/order", 200, `{"biz_tag":"order","max_id":1,"step":1,"max_step":0,"description":""}`},
	}
	for _, b := range bad {
		req := httptest.NewRequest(b.method, b.path, nil)
		if err := checkReply(req, b.status, json, []byte(b.body)); err == nil {
			t.Errorf("%s: %s accepted", b.name, b.body)
		}
	}
	good := []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/id?biz_tag=order", 200, `{"biz_tag":"order","id":"5"}`},
		{"GET", "/nope", 404, `{"error":{"code":"not_found","message":"no such endpoint: /nope; see /id/dashboard (the live view), /id/health (health as JSON) and /openapi.yaml (every route)"}}`},
		{"GET", "/v1/segments", 405, `{"error":{"code":"method_not_allowed","message":"use POST"}}`},
		{"POST", "/v1/segments", 200, `{"biz_tag":"order","request_id":"0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a","first":"1","last":"10","step":10,"max_step":100,"recovered":true,"runway_seconds":60}`},
	}
	for _, g := range good {
		req := httptest.NewRequest(g.method, g.path, nil)
		if err := checkReply(req, g.status, json, []byte(g.body)); err != nil {
			t.Errorf("a good reply to %s %s refused: %v", g.method, g.path, err)
		}
	}
}

// TestOpenAPI_HealthFields: every field of /id/health is in the document's
// Health schema, whose properties the validator does not close (fields are
// only ever added), so a field left out of it would pass unnoticed. It
// walks a real reply, with a replication section, Snowflake mode and a
// loaded tag, key by key against the schema's properties ($ref and allOf
// resolved); then the Go types of the document, for the fields a reply
// leaves out when empty.
func TestOpenAPI_HealthFields(t *testing.T) {
	if _, err := spec(); err != nil {
		t.Fatal(err)
	}
	schema := specDoc.Components.Schemas["Health"].Value

	t.Run("reply", func(t *testing.T) {
		m := memstore.New()
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
			t.Fatal(err)
		}
		a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
		t.Cleanup(func() { a.Close(context.Background()) })
		seen := time.Now().Add(-time.Hour).UTC()
		streaming := postgres.Standby{Name: "db2", Kind: postgres.KindStreaming, State: "streaming", Slot: true, SyncState: "async", Position: "0/3000060"}
		away := postgres.Standby{Name: "db3", Kind: postgres.KindRemembered, State: "disconnected", Position: "0/2000000", LastSeen: &seen}
		repl := replicationSource{st: postgres.ReplicationStatus{
			Timeline: 1, InitialTimeline: 1, Required: postgres.ReplicasAuto, Ack: postgres.AckFlush, Replicas: 1,
			Standbys: []postgres.Standby{streaming, away},
			Held:     []postgres.HeldStandby{{Standby: away, Since: time.Now().Add(-time.Minute)}},
		}}
		node := startNode(t, lease.NewMemory(nil), "a")
		srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{
			Allocator: a, Instance: "fields", Logger: testlog.Discard(), Replication: repl, Snowflake: node,
		})))
		t.Cleanup(srv.Close)
		for range 3 {
			if status, _, body := get(t, srv, "/id?biz_tag=order"); status != 200 {
				t.Fatalf("/id: %d %s", status, body)
			}
		}
		status, _, body := get(t, srv, "/id/health")
		var reply map[string]any
		if err := json.Unmarshal(body, &reply); err != nil {
			t.Fatalf("/id/health: %d %s", status, body)
		}
		for _, section := range []string{"replication", "snowflake", "tags"} {
			if reply[section] == nil {
				t.Fatalf("/id/health has no %s section to check: %s", section, body)
			}
		}
		for _, miss := range undocumentedKeys("", reply, schema) {
			t.Errorf("/id/health carries %s, which the Health schema lacks", miss)
		}
	})

	t.Run("types", func(t *testing.T) {
		for _, miss := range undocumentedFields("", reflect.TypeFor[httpapi.Health](), schema) {
			t.Errorf("httpapi.Health has %s, which the Health schema lacks", miss)
		}
	})
}

// properties is the properties of s and of the schemas it is allOf, oneOf
// or anyOf ($refs are resolved by the loader).
func properties(s *openapi3.Schema) map[string]*openapi3.Schema {
	out := map[string]*openapi3.Schema{}
	if s == nil {
		return out
	}
	for name, p := range s.Properties {
		out[name] = p.Value
	}
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, r := range refs {
			maps.Copy(out, properties(r.Value))
		}
	}
	return out
}

// items is the item schema of the array schema s, through allOf.
func items(s *openapi3.Schema) *openapi3.Schema {
	if s == nil {
		return nil
	}
	if s.Items != nil {
		return s.Items.Value
	}
	for _, r := range s.AllOf {
		if it := items(r.Value); it != nil {
			return it
		}
	}
	return nil
}

// undocumentedKeys lists the keys of the decoded JSON v, at any depth,
// that schema s has no property for.
func undocumentedKeys(path string, v any, s *openapi3.Schema) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props := properties(s)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			p, ok := props[k]
			if !ok {
				out = append(out, path+"/"+k)
				continue
			}
			out = append(out, undocumentedKeys(path+"/"+k, v[k], p)...)
		}
	case []any:
		it := items(s)
		for i, x := range v {
			if it == nil {
				out = append(out, fmt.Sprintf("%s/%d (no items schema)", path, i))
				break
			}
			out = append(out, undocumentedKeys(fmt.Sprintf("%s/%d", path, i), x, it)...)
		}
	}
	return out
}

// undocumentedFields lists the JSON fields of the Go type t, at any depth,
// that schema s has no property for: those a reply omits when empty too.
func undocumentedFields(path string, t reflect.Type, s *openapi3.Schema) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch {
	case t == reflect.TypeFor[time.Time]():
	case t.Kind() == reflect.Slice:
		it := items(s)
		if it == nil {
			return []string{path + "[] (no items schema)"}
		}
		out = append(out, undocumentedFields(path+"[]", t.Elem(), it)...)
	case t.Kind() == reflect.Struct:
		props := properties(s)
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case !f.IsExported() || name == "-":
			case f.Anonymous && name == "":
				// Embedded: its fields are this object's.
				out = append(out, undocumentedFields(path, f.Type, s)...)
			default:
				if name == "" {
					name = f.Name
				}
				p, ok := props[name]
				if !ok {
					out = append(out, path+"/"+name)
					continue
				}
				out = append(out, undocumentedFields(path+"/"+name, f.Type, p)...)
			}
		}
	}
	return out
}
