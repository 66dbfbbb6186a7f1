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
	for _, rule := range errorTable {
		if _, ok := httpStatus[rule.code]; !ok {
			t.Errorf("%s: no status in httpStatus", rule.code)
		}
		if s, ok := status[rule.code]; ok && s != rule.status {
			t.Errorf("%s: status %d in one row, %d in another", rule.code, s, rule.status)
		}
		status[rule.code] = rule.status
		if rule.err == nil {
			own[rule.code]++
		} else if born := wire.CodeOf(rule.err); born != "" && born != rule.code {
			t.Errorf("%v: born with code %s, the table answers %s", rule.err, born, rule.code)
		}
		if rule.when == "" || rule.status < 400 {
			t.Errorf("%s: status %d, when %q", rule.code, rule.status, rule.when)
		}
		if rule.refusal && rule.status >= 500 {
			t.Errorf("%s: a %d is not a refusal", rule.code, rule.status)
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
	if internalRule == nil || internalRule.status != http.StatusInternalServerError {
		t.Fatalf("no internal row: %+v", internalRule)
	}
}

// TestServer_WriteError: WriteError answers every row of the table as the row says:
// status, code, Retry-After, message, and the refusal counted or not;
// an error the table does not know is a 500 that tells nothing.
func TestServer_WriteError(t *testing.T) {
	type probe struct {
		name    string
		err     error
		rule    *errorRule
		message string // the reply's message
	}
	var probes []probe
	for i := range errorTable {
		rule := &errorTable[i]
		if rule.err == nil {
			msg := cmp.Or(rule.message, "own message of "+rule.code)
			probes = append(probes, probe{rule.code, requestError(rule.code, "own message of "+rule.code), rule, msg})
			continue
		}
		err := fmt.Errorf("while serving: %w", rule.err)
		msg := rule.message
		if msg == "" {
			msg = err.Error()
		}
		probes = append(probes, probe{rule.code + " " + rule.err.Error(), err, rule, msg})
	}
	probes = append(probes,
		probe{"unknown error", errors.New(`ERROR: relation "idmint_tags" does not exist (SQLSTATE 42P01)`), internalRule, "internal error"},
		probe{"unknown own code", requestError("no_such_code", "x"), internalRule, "internal error"},
		probe{"rate limit's wait", rateLimited(3500 * time.Millisecond), ownRules[wire.CodeRateLimited], "too many ids asked for; retry after the time in Retry-After"},
		probe{"store's wait", fmt.Errorf("tag order: %w", &segment.UnavailableError{RetryAfter: 7 * time.Second, Err: errors.New("dial tcp: refused")}), lookup(segment.ErrUnavailable), lookup(segment.ErrUnavailable).message},
	)
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			s := &Server{cfg: Config{Metrics: NewMetrics(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
			counted := func() float64 {
				var m dto.Metric
				if err := s.cfg.Metrics.refusedCounter().WithLabelValues(p.rule.code).Write(&m); err != nil {
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
			if rec.Code != p.rule.status || body.Error.Code != p.rule.code || body.Error.Message != p.message {
				t.Fatalf("reply %d %+v; want %d %s %q", rec.Code, body.Error, p.rule.status, p.rule.code, p.message)
			}
			wantRetry := map[retryRule]string{retryNone: "", retryFixed: "1", retryFromError: "1"}[p.rule.retry]
			switch p.name {
			case "rate limit's wait":
				wantRetry = "4"
			case "store's wait":
				wantRetry = "7"
			}
			if got := rec.Header().Get("Retry-After"); got != wantRetry {
				t.Errorf("Retry-After %q, want %q", got, wantRetry)
			}
			if n := counted() - before; n != map[bool]float64{true: 1}[p.rule.refusal] {
				t.Errorf("idmint_http_refused_total{code=%q} rose by %v; the row's refusal is %v", p.rule.code, n, p.rule.refusal)
			}
		})
	}
}

// tableCodes returns the codes of errorTable, sorted, once each.
func tableCodes() []string {
	var codes []string
	for _, rule := range errorTable {
		codes = append(codes, rule.code)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// renderErrorsDoc writes docs/errors.md from errorTable.
func renderErrorsDoc() string {
	var b strings.Builder
	b.WriteString(`# Errors

<!-- Generated from errorTable in httpapi/errors.go: edit the table, then run
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

One row per error, in the order they are matched: first httpapi's own
errors, then the sentinel errors of the packages below it.

| status | code | Retry-After | refused | message | when |
|---|---|---|---|---|---|
`)
	for _, rule := range errorTable {
		retry := map[retryRule]string{retryNone: "—", retryFixed: "1 s", retryFromError: "the wait the error carries, else 1 s"}[rule.retry]
		refused := map[bool]string{true: "counted", false: "—"}[rule.refusal]
		msg := "the error's text"
		if rule.message != "" {
			msg = "“" + rule.message + "”"
		}
		if rule.err == nil && rule.message == "" {
			msg = "says what is wrong and what is wanted"
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | %s | %s | %s |\n", rule.status, rule.code, retry, refused,
			strings.ReplaceAll(msg, "|", `\|`), strings.ReplaceAll(rule.when, "|", `\|`))
	}
	return b.String()
}
