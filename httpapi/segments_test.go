package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

func post(tb testing.TB, srv *httptest.Server, path, body string) (int, http.Header, []byte) {
	tb.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func grantBody(tag string, size int64, id uuid.UUID) string {
	js, _ := json.Marshal(wire.SegmentRequest{Tag: tag, Size: size, RequestID: id.String(), HolderKey: holderKey(id)})
	return string(js)
}

// holderKey is the test's holder key of request id: the same on every
// retry, another for every request.
func holderKey(id uuid.UUID) string { return "key" + strings.ReplaceAll(id.String(), "-", "") }

// rangeServers starts n instances over one store with tag "order" (step
// 10, max_step 100).
func rangeServers(tb testing.TB, n int) ([]*httptest.Server, *memstore.Store) {
	tb.Helper()
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10, MaxStep: 100}); err != nil {
		tb.Fatal(err)
	}
	var srvs []*httptest.Server
	for range n {
		a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), Instance: "test"})
		tb.Cleanup(func() { a.Close(context.Background()) })
		srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()})))
		tb.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	return srvs, m
}

func TestServer_Segments(t *testing.T) {
	srvs, m := rangeServers(t, 2)
	id := uuid.Must(uuid.NewV7())

	t.Run("a retry through another instance gets the same range", func(t *testing.T) {
		var got []wire.SegmentResponse
		for _, srv := range []*httptest.Server{srvs[0], srvs[1], srvs[0]} {
			code, _, body := post(t, srv, "/v1/segments", grantBody("order", 50, id))
			var r wire.SegmentResponse
			if code != http.StatusOK || json.Unmarshal(body, &r) != nil {
				t.Fatalf("status %d: %s", code, body)
			}
			got = append(got, r)
		}
		want := wire.SegmentResponse{Tag: "order", RequestID: id.String(), First: 1, Last: 50, Step: 10, MaxStep: 100}
		if got[0] != want {
			t.Fatalf("first answer %+v, want %+v", got[0], want)
		}
		for _, r := range got[1:] {
			want.Recovered = true
			if r != want {
				t.Fatalf("retry answered %+v, want %+v", r, want)
			}
		}
		if tags, _ := m.Tags(t.Context()); tags[0].MaxID != 50 {
			t.Fatalf("max_id %d after one request and two retries, want 50", tags[0].MaxID)
		}
	})

	t.Run("size is bounded by step and max_step", func(t *testing.T) {
		for _, c := range []struct{ size, want int64 }{{0, 10}, {3, 10}, {1000, 100}} {
			var r wire.SegmentResponse
			_, _, body := post(t, srvs[0], "/v1/segments", grantBody("order", c.size, uuid.Must(uuid.NewV7())))
			if json.Unmarshal(body, &r) != nil || r.Last-r.First+1 != c.want {
				t.Fatalf("size %d: %s, want %d ids", c.size, body, c.want)
			}
		}
	})

	t.Run("give back: the tail of the newest range, once", func(t *testing.T) {
		rid := uuid.Must(uuid.NewV7())
		var r wire.SegmentResponse
		code, _, body := post(t, srvs[1], "/v1/segments", grantBody("order", 10, rid))
		if err := json.Unmarshal(body, &r); err != nil || code != http.StatusOK {
			t.Fatal(err)
		}
		gb := func(first, last int64) wire.GiveBackResponse {
			t.Helper()
			js, _ := json.Marshal(wire.GiveBackRequest{Tag: "order", RequestID: rid.String(), HolderKey: holderKey(rid), First: first, Last: last})
			code, _, body := post(t, srvs[0], "/v1/segments/giveback", string(js))
			var g wire.GiveBackResponse
			if code != http.StatusOK || json.Unmarshal(body, &g) != nil {
				t.Fatalf("status %d: %s", code, body)
			}
			return g
		}
		if g := gb(r.First+3, r.Last); !g.GivenBack || g.First != r.First+3 {
			t.Fatalf("give back = %+v", g)
		}
		if g := gb(r.First+3, r.Last); g.GivenBack {
			t.Fatalf("second give back = %+v", g)
		}
		if tags, _ := m.Tags(t.Context()); tags[0].MaxID != r.First+2 {
			t.Fatalf("max_id %d, want %d", tags[0].MaxID, r.First+2)
		}
		// A retry of the grant gets only what the holder kept.
		var again wire.SegmentResponse
		code, _, body = post(t, srvs[0], "/v1/segments", grantBody("order", 10, rid))
		if code != http.StatusOK || json.Unmarshal(body, &again) != nil || again.First != r.First || again.Last != r.First+2 || !again.Recovered {
			t.Fatalf("retry after the give-back: %d %s; want [%d, %d] recovered", code, body, r.First, r.First+2)
		}
	})

	t.Run("a stranger with the request ID gets nothing and gives back nothing", func(t *testing.T) {
		rid := uuid.Must(uuid.NewV7())
		var r wire.SegmentResponse
		if _, _, body := post(t, srvs[0], "/v1/segments", grantBody("order", 10, rid)); json.Unmarshal(body, &r) != nil {
			t.Fatal(string(body))
		}
		stranger := wire.SegmentRequest{Tag: "order", Size: 10, RequestID: rid.String(), HolderKey: "a-strangers-own-holder-key"}
		js, _ := json.Marshal(stranger)
		if code, _, body := post(t, srvs[1], "/v1/segments", string(js)); code != http.StatusConflict || errorCode(t, body) != wire.CodeNotHolder {
			t.Fatalf("stranger's grant: %d %s", code, body)
		}
		js, _ = json.Marshal(wire.GiveBackRequest{Tag: "order", RequestID: rid.String(), HolderKey: stranger.HolderKey, First: r.First + 1, Last: r.Last})
		if code, _, body := post(t, srvs[1], "/v1/segments/giveback", string(js)); code != http.StatusConflict || errorCode(t, body) != wire.CodeNotHolder ||
			strings.Contains(string(body), stranger.HolderKey) {
			t.Fatalf("stranger's give-back: %d %s", code, body)
		}
		if tags, _ := m.Tags(t.Context()); tags[0].MaxID != r.Last {
			t.Fatalf("max_id %d, want %d: a stranger changed the tag", tags[0].MaxID, r.Last)
		}
	})

	t.Run("a request ID is one tag's", func(t *testing.T) {
		if _, err := m.CreateTag(t.Context(), allocator.TagSpec{Name: "user"}); err != nil {
			t.Fatal(err)
		}
		code, _, body := post(t, srvs[0], "/v1/segments", grantBody("user", 0, id))
		if code != http.StatusConflict || errorCode(t, body) != wire.CodeRequestConflict {
			t.Fatalf("status %d: %s", code, body)
		}
	})
}

func TestServer_SegmentsBadInput(t *testing.T) {
	srvs, m := rangeServers(t, 1)
	rid := uuid.Must(uuid.NewV7())
	id := rid.String()
	hk := `","holder_key":"` + holderKey(rid)
	tests := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"not JSON", "/v1/segments", `biz_tag=order`, 400, wire.CodeBadRequest},
		{"unknown field", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + `","count":5}`, 400, wire.CodeBadRequest},
		{"two objects", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + `"}{}`, 400, wire.CodeBadRequest},
		{"huge body", "/v1/segments", `{"biz_tag":"` + strings.Repeat("a", 5000) + `"}`, 400, wire.CodeBadRequest},
		{"no tag", "/v1/segments", `{"request_id":"` + id + `"}`, 400, wire.CodeInvalidTag},
		{"bad tag", "/v1/segments", `{"biz_tag":"a b","request_id":"` + id + `"}`, 400, wire.CodeInvalidTag},
		{"no request id", "/v1/segments", `{"biz_tag":"order"}`, 400, wire.CodeInvalidRequestID},
		{"bad request id", "/v1/segments", `{"biz_tag":"order","request_id":"42"}`, 400, wire.CodeInvalidRequestID},
		{"nil request id", "/v1/segments", `{"biz_tag":"order","request_id":"` + uuid.Nil.String() + `"}`, 400, wire.CodeInvalidRequestID},
		{"negative size", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + hk + `","size":-1}`, 400, wire.CodeInvalidSize},
		{"size too large", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + hk + `","size":100000001}`, 400, wire.CodeInvalidSize},
		{"size as a string", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + hk + `","size":"5"}`, 400, wire.CodeBadRequest},
		{"unknown tag", "/v1/segments", `{"biz_tag":"nope","request_id":"` + id + hk + `"}`, 404, wire.CodeUnknownTag},
		{"give back an empty range", "/v1/segments/giveback", `{"biz_tag":"order","request_id":"` + id + hk + `","first":"5","last":"4"}`, 400, wire.CodeInvalidRange},
		{"give back from 0", "/v1/segments/giveback", `{"biz_tag":"order","request_id":"` + id + hk + `","first":"0","last":"4"}`, 400, wire.CodeInvalidRange},
		{"no holder key", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + `"}`, 400, wire.CodeInvalidHolderKey},
		{"short holder key", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + `","holder_key":"abc"}`, 400, wire.CodeInvalidHolderKey},
		{"holder key of other characters", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + `","holder_key":"` + strings.Repeat("é", 30) + `"}`, 400, wire.CodeInvalidHolderKey},
		{"holder key too long", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + `","holder_key":"` + strings.Repeat("a", 129) + `"}`, 400, wire.CodeInvalidHolderKey},
		{"negative floor", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + hk + `","floor":"-1"}`, 400, wire.CodeInvalidFloor},
		{"floor as a number", "/v1/segments", `{"biz_tag":"order","request_id":"` + id + hk + `","floor":5}`, 400, wire.CodeBadRequest},
		{"give back without a holder key", "/v1/segments/giveback", `{"biz_tag":"order","request_id":"` + id + `","first":"1","last":"4"}`, 400, wire.CodeInvalidHolderKey},
		{"give back numbers", "/v1/segments/giveback", `{"biz_tag":"order","request_id":"` + id + hk + `","first":1,"last":4}`, 400, wire.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := post(t, srvs[0], tt.path, tt.body)
			if code != tt.status || errorCode(t, body) != tt.code {
				t.Fatalf("status %d, body %s; want %d %s", code, body, tt.status, tt.code)
			}
		})
	}
	t.Run("GET is not allowed", func(t *testing.T) {
		code, _, body := get(t, srvs[0], "/v1/segments")
		if code != http.StatusMethodNotAllowed || errorCode(t, body) != wire.CodeMethod || !strings.Contains(string(body), "POST") {
			t.Fatalf("status %d: %s", code, body)
		}
	})
	if tags, _ := m.Tags(t.Context()); tags[0].MaxID != 0 {
		t.Fatalf("bad requests moved max_id to %d", tags[0].MaxID)
	}
}

func FuzzServer_Segments(f *testing.F) {
	f.Add(`{"biz_tag":"order","size":5,"request_id":"0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a","holder_key":"0123456789abcdefghijklmnop"}`)
	f.Add(`{"biz_tag":"order","request_id":"0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a","holder_key":"0123456789abcdefghijklmnop","floor":"9223372036854775807"}`)
	f.Add(`{"biz_tag":"order","request_id":"{0190d6a2-7f3c-7b1e-9a4b-2f1e3d5c6b7a}"}`)
	f.Add(`{"biz_tag":"","size":1e30}`)
	f.Add(`[]`)
	srvs, _ := rangeServers(f, 1)
	client := &http.Client{Timeout: 5 * time.Second, Transport: validating{next: http.DefaultTransport}}
	f.Fuzz(func(t *testing.T, body string) {
		resp, err := client.Post(srvs[0].URL+"/v1/segments", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		switch resp.StatusCode {
		case http.StatusOK:
			var r wire.SegmentResponse
			if json.Unmarshal(data, &r) != nil || r.First < 1 || r.Last < r.First {
				t.Fatalf("200 with %s", data)
			}
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict:
			errorCode(t, data)
		default:
			t.Fatalf("status %d for %q: %s", resp.StatusCode, body, data)
		}
	})
}
