package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/idmint/idmint/httpapi"
)

// Every reply the HTTP tests of this package receive over a client goes
// through validating, which checks it against the OpenAPI document; TestMain
// fails the run if any did not match.
var (
	specOnce   sync.Once
	specRouter routers.Router
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
		specRouter, specErr = legacy.NewRouter(doc)
	})
	return specRouter, specErr
}

// checkReply validates one reply against the document; it returns nil for
// paths the document does not describe (404 not_found is checked by the
// tests that ask for them).
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
		return nil
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
		name, path string
		status     int
		body       string
	}{
		{"id as a number", "/id?biz_tag=order", 200, `{"biz_tag":"order","id":5}`},
		{"extra field", "/id?biz_tag=order", 200, `{"biz_tag":"order","id":"5","x":1}`},
		{"error without code", "/id?biz_tag=order", 404, `{"error":{"message":"x"}}`},
		{"unknown error code", "/ids?biz_tag=order&count=1", 400, `{"error":{"code":"oops","message":"x"}}`},
		{"empty ids", "/ids?biz_tag=order&count=1", 200, `{"biz_tag":"order","ids":[]}`},
		{"tag max_id as a number", "/v1/tags/order", 200, `{"biz_tag":"order","max_id":1,"step":1,"max_step":0,"description":""}`},
	}
	for _, b := range bad {
		req := httptest.NewRequest(http.MethodGet, b.path, nil)
		if err := checkReply(req, b.status, json, []byte(b.body)); err == nil {
			t.Errorf("%s: %s accepted", b.name, b.body)
		}
	}
	good := httptest.NewRequest(http.MethodGet, "/id?biz_tag=order", nil)
	if err := checkReply(good, 200, json, []byte(`{"biz_tag":"order","id":"5"}`)); err != nil {
		t.Errorf("a good reply refused: %v", err)
	}
}
