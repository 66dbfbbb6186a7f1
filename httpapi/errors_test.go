package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	dto "github.com/prometheus/client_model/go"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// errorsDoc is the page generated from errorTable; set IDMINT_UPDATE_DOCS=1
// to write it after a change to the table.
const errorsDoc = "../docs/errors.md"

// TestErrorTable_Docs: docs/errors.md is exactly the table rendered, so a
// row changed in errors.go (a status, a Retry-After, a refusal no longer
// counted) shows in the review as a change of the documented API.
func TestErrorTable_Docs(t *testing.T) {
	want := renderErrorsDoc()
	if os.Getenv("IDMINT_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(errorsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(errorsDoc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not errors.go's table; regenerate it with IDMINT_UPDATE_DOCS=1 go test -run TestErrorTable_Docs ./httpapi/\n--- want\n%s", errorsDoc, want)
	}
	// The README (or the page the README's API section moved to) points
	// at the table instead of keeping a copy of it.
	pages, _ := filepath.Glob("../docs/*.md")
	linked := false
	for _, p := range append(pages, "../README.md") {
		if b, err := os.ReadFile(p); err == nil && p != errorsDoc && strings.Contains(string(b), "errors.md") {
			linked = true
		}
	}
	if !linked {
		t.Error("neither the README nor a page of docs/ links to docs/errors.md")
	}
}

// TestErrorTable_OpenAPI: the document's error code enum is exactly the
// table's codes, so a new code cannot be forgotten in the document (nor a
// dropped one left in it).
func TestErrorTable_OpenAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.Properties["code"].Value.Enum {
		enum = append(enum, v.(string))
	}
	slices.Sort(enum)
	if codes := tableCodes(); !slices.Equal(enum, codes) {
		t.Fatalf("openapi.yaml's error code enum\n  %v\nis not errors.go's codes\n  %v", enum, codes)
	}
}

// TestErrorTable_Rows: the table is one mapping: a code has one status,
// each of httpapi's own codes one row, every row says when it applies, and
// only 4xx replies count as refusals.
func TestErrorTable_Rows(t *testing.T) {
	status := map[string]int{}
	own := map[string]int{}
	for i := range core.Rules {
		rule := &core.Rules[i]
		if _, ok := httpStatus[rule.Code]; !ok {
			t.Errorf("%s: no status in httpStatus", rule.Code)
		}
		if s, ok := status[rule.Code]; ok && s != statusOf(rule) {
			t.Errorf("%s: status %d in one row, %d in another", rule.Code, s, statusOf(rule))
		}
		status[rule.Code] = statusOf(rule)
		if rule.Err == nil {
			own[rule.Code]++
		} else if born := wire.CodeOf(rule.Err); born != "" && born != rule.Code {
			t.Errorf("%v: born with code %s, the table answers %s", rule.Err, born, rule.Code)
		}
		if rule.When == "" || statusOf(rule) < 400 {
			t.Errorf("%s: status %d, when %q", rule.Code, statusOf(rule), rule.When)
		}
		if rule.Refusal && statusOf(rule) >= 500 {
			t.Errorf("%s: a %d is not a refusal", rule.Code, statusOf(rule))
		}
	}
	for code, n := range own {
		if n != 1 {
			t.Errorf("%s: %d rows of httpapi's own error", code, n)
		}
	}
	for code := range httpStatus {
		if _, ok := status[code]; !ok {
			t.Errorf("%s: a status, and no row", code)
		}
	}
	if internalRule() == nil || statusOf(internalRule()) != http.StatusInternalServerError {
		t.Fatalf("no internal row: %+v", internalRule())
	}
}

// TestServer_WriteError: WriteError answers every row of the table as the row says:
// status, code, Retry-After, message, and the refusal counted or not;
// an error the table does not know is a 500 that tells nothing.
func TestServer_WriteError(t *testing.T) {
	type probe struct {
		name    string
		err     error
		rule    *core.Rule
		message string // the reply's message
	}
	var probes []probe
	for i := range core.Rules {
		rule := &core.Rules[i]
		if rule.Err == nil {
			msg := cmp.Or(rule.Message, "own message of "+rule.Code)
			probes = append(probes, probe{rule.Code, newError(rule.Code, "own message of "+rule.Code), rule, msg})
			continue
		}
		err := fmt.Errorf("while serving: %w", rule.Err)
		msg := rule.Message
		if msg == "" {
			msg = err.Error()
		}
		probes = append(probes, probe{rule.Code + " " + rule.Err.Error(), err, rule, msg})
	}
	probes = append(probes,
		probe{"unknown error", errors.New(`ERROR: relation "idmint_tags" does not exist (SQLSTATE 42P01)`), internalRule(), "internal error"},
		probe{"unknown own code", newError("no_such_code", "x"), internalRule(), "internal error"},
		probe{"rate limit's wait", &core.Error{Code: wire.CodeRateLimited, Message: "too many ids asked for; retry after the time in Retry-After", RetryAfter: 3500 * time.Millisecond}, core.Lookup(newError(wire.CodeRateLimited, "")), "too many ids asked for; retry after the time in Retry-After"},
		probe{"store's wait", fmt.Errorf("tag order: %w", &segment.UnavailableError{RetryAfter: 7 * time.Second, Err: errors.New("dial tcp: refused")}), core.Lookup(segment.ErrUnavailable), core.Lookup(segment.ErrUnavailable).Message},
	)
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			s := &Server{cfg: Config{Metrics: NewMetrics(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
			counted := func() float64 {
				var m dto.Metric
				if err := s.cfg.Metrics.refusedCounter().WithLabelValues(p.rule.Code).Write(&m); err != nil {
					t.Fatal(err)
				}
				return m.GetCounter().GetValue()
			}
			before := counted()
			rec := httptest.NewRecorder()
			s.WriteError(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/id?biz_tag=order", nil), p.err)

			var body wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("reply %q: %v", rec.Body, err)
			}
			if rec.Code != statusOf(p.rule) || body.Error.Code != p.rule.Code || body.Error.Message != p.message {
				t.Fatalf("reply %d %+v; want %d %s %q", rec.Code, body.Error, statusOf(p.rule), p.rule.Code, p.message)
			}
			wantRetry := map[core.Retry]string{core.RetryNone: "", core.RetryFixed: "1", core.RetryFromError: "1"}[p.rule.Retry]
			switch p.name {
			case "rate limit's wait":
				wantRetry = "4"
			case "store's wait":
				wantRetry = "7"
			}
			if got := rec.Header().Get("Retry-After"); got != wantRetry {
				t.Errorf("Retry-After %q, want %q", got, wantRetry)
			}
			if n := counted() - before; n != map[bool]float64{true: 1}[p.rule.Refusal] {
				t.Errorf("idmint_http_refused_total{code=%q} rose by %v; the row's refusal is %v", p.rule.Code, n, p.rule.Refusal)
			}
		})
	}
}

// tableCodes returns the codes of core.Rules, sorted, once each.
func tableCodes() []string {
	var codes []string
	for i := range core.Rules {
		rule := &core.Rules[i]
		codes = append(codes, rule.Code)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// renderErrorsDoc writes docs/errors.md from core.Rules and httpStatus.
func renderErrorsDoc() string {
	var b strings.Builder
	b.WriteString(`# Errors

<!-- Generated from core.Rules (core/errors.go) and httpStatus
     (httpapi/errors.go): edit them, then run
     IDMINT_UPDATE_DOCS=1 go test -run TestErrorTable_Docs ./httpapi/
     TestErrorTable_Docs fails while this page and the table differ. -->

Every error is a JSON reply with a stable, machine-readable ` + "`code`" + ` and a
message for people (messages may change; codes do not):

` + "```json" + `
{"error": {"code": "unknown_tag", "message": "unknown biz_tag: \"nope\""}}
` + "```" + `

Bad input changes nothing. Messages go through the redactor, never hold a
stack trace or SQL, and quote inputs truncated (a tag to 80 bytes, paths and
queries to 256). A body that is not the JSON asked for is answered with the
field and what it wants, e.g. ` + "`step: want a whole number`" + `.
Replies counted as refused add one to ` + "`idmint_http_refused_total{code}`" + `.
The same codes are the enum of the ` + "`Error`" + ` schema in ` + "`httpapi/openapi.yaml`" + `.

One row per error, in the order they are matched: first the core's and the
adapters' own errors, then the sentinel errors of the packages below them.
The status is the HTTP one; gRPC answers each code with its own status
(rpcapi's grpcCodes) and the code in ` + "`google.rpc.ErrorInfo`" + `.

| status | code | Retry-After | refused | message | when |
|---|---|---|---|---|---|
`)
	for i := range core.Rules {
		rule := &core.Rules[i]
		retry := map[core.Retry]string{core.RetryNone: "—", core.RetryFixed: "1 s", core.RetryFromError: "the wait the error carries, else 1 s"}[rule.Retry]
		refused := map[bool]string{true: "counted", false: "—"}[rule.Refusal]
		msg := "the error's text"
		if rule.Message != "" {
			msg = "“" + rule.Message + "”"
		}
		if rule.Err == nil && rule.Message == "" {
			msg = "says what is wrong and what is wanted"
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | %s | %s | %s |\n", statusOf(rule), rule.Code, retry, refused,
			strings.ReplaceAll(msg, "|", `\|`), strings.ReplaceAll(rule.When, "|", `\|`))
	}
	return b.String()
}

// internalRule is the row of an error the table does not know.
func internalRule() *core.Rule { return core.Lookup(errors.New("no row")) }
