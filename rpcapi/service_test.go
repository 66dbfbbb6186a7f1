package rpcapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/rpcapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// fixture is one server over a memory store with tag order (step 10,
// max_step 100), its allocator, and a token of each kind.
type fixture struct {
	url              string
	alloc            *allocator.Allocator
	down             *atomic.Bool // makes the database check fail: /id/health 503
	admin, ids, none string       // tokens: admin scope, ids:order, monitor only
}

func newFixture(tb testing.TB, mode httpapi.AuthMode) *fixture {
	tb.Helper()
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 100}); err != nil {
		tb.Fatal(err)
	}
	f := &fixture{}
	for _, tk := range []struct {
		dst   *string
		scope string
	}{{&f.admin, "admin"}, {&f.ids, "ids:order"}, {&f.none, "monitor"}} {
		t, secret, err := token.New(tk.scope, []string{tk.scope})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := m.CreateToken(ctx, t); err != nil {
			tb.Fatal(err)
		}
		*tk.dst = secret
	}
	f.alloc = allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), Instance: "test"})
	tb.Cleanup(func() { f.alloc.Close(context.Background()) })
	f.down = new(atomic.Bool)
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: pingable{f.alloc, f.down}, Logger: testlog.Discard(), Admin: m, TokenAdmin: m,
		Auth: httpapi.AuthConfig{Tokens: m, IDs: mode}, RPC: rpcapi.New()}))
	tb.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// pingable is an allocator whose database check fails while down is set.
type pingable struct {
	*allocator.Allocator
	down *atomic.Bool
}

func (p pingable) Ping(ctx context.Context) error {
	if p.down.Load() {
		return errors.New("dial tcp: connection refused")
	}
	return p.Allocator.Ping(ctx)
}

// bearer returns the options that send token.
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	}))
}

// reason is the idmint code of err's ErrorInfo.
func reason(err error) string { return errorInfo(err).GetReason() }

// errorInfo is err's ErrorInfo of idmint's domain, nil without one.
func errorInfo(err error) *errdetails.ErrorInfo {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if m, err := d.Value(); err == nil {
			if info, ok := m.(*errdetails.ErrorInfo); ok && info.GetDomain() == rpcapi.ErrorDomain {
				return info
			}
		}
	}
	return nil
}

// retryDelay is the delay of err's RetryInfo, 0 without one.
func retryDelay(err error) time.Duration {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0
	}
	for _, d := range ce.Details() {
		if m, err := d.Value(); err == nil {
			if ri, ok := m.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration()
			}
		}
	}
	return 0
}

// TestService_Scopes: each procedure asks what its HTTP route asks: the
// admin procedures an admin token, the ID procedures (in the token mode) a
// token whose scope covers the tag.
func TestService_Scopes(t *testing.T) {
	f := newFixture(t, httpapi.AuthToken)
	ctx := context.Background()
	tests := []struct {
		name   string
		token  string
		call   func(connect.ClientOption) error
		code   connect.Code // 0: success
		reason string
	}{
		{name: "NextID without a token", call: nextID(ctx, f.url, "order"), code: connect.CodeUnauthenticated, reason: wire.CodeUnauthorized},
		{name: "NextID with a monitor token", token: f.none, call: nextID(ctx, f.url, "order"), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "NextID with an admin token", token: f.admin, call: nextID(ctx, f.url, "order"), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "NextID in scope", token: f.ids, call: nextID(ctx, f.url, "order")},
		{name: "NextID of an unknown tag", token: f.ids, call: nextID(ctx, f.url, "nope"), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "ListTags with an ID token", token: f.ids, call: listTags(ctx, f.url), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "ListTags without a token", call: listTags(ctx, f.url), code: connect.CodeUnauthenticated, reason: wire.CodeUnauthorized},
		{name: "ListTags with an admin token", token: f.admin, call: listTags(ctx, f.url)},
		{name: "ListTokens with a monitor token", token: f.none, call: listTokens(ctx, f.url), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "ListTokens with an ID token", token: f.ids, call: listTokens(ctx, f.url), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "ListTokens without a token", call: listTokens(ctx, f.url), code: connect.CodeUnauthenticated, reason: wire.CodeUnauthorized},
		{name: "ListTokens with an admin token", token: f.admin, call: listTokens(ctx, f.url)},
		{name: "CreateToken with a monitor token", token: f.none, call: createToken(ctx, f.url), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "CreateToken with an ID token", token: f.ids, call: createToken(ctx, f.url), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
		{name: "RevokeToken with an ID token", token: f.ids, call: revokeToken(ctx, f.url), code: connect.CodePermissionDenied, reason: wire.CodeForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(bearer(tt.token))
			if tt.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if connect.CodeOf(err) != tt.code || reason(err) != tt.reason {
				t.Fatalf("%v (reason %q), want %v with reason %q", err, reason(err), tt.code, tt.reason)
			}
		})
	}
}

func nextID(ctx context.Context, url, tag string) func(connect.ClientOption) error {
	return func(o connect.ClientOption) error {
		_, err := idmintv1connect.NewIDServiceClient(http.DefaultClient, url, o).NextID(ctx, connect.NewRequest(&idmintv1.NextIDRequest{BizTag: tag}))
		return err
	}
}

func listTags(ctx context.Context, url string) func(connect.ClientOption) error {
	return func(o connect.ClientOption) error {
		resp, err := idmintv1connect.NewAdminServiceClient(http.DefaultClient, url, o).ListTags(ctx, connect.NewRequest(&idmintv1.ListTagsRequest{}))
		if err == nil && (len(resp.Msg.GetTags()) != 1 || resp.Msg.GetTags()[0].GetBizTag() != "order") {
			return errors.New("ListTags: want the tag order")
		}
		return err
	}
}

func listTokens(ctx context.Context, url string) func(connect.ClientOption) error {
	return func(o connect.ClientOption) error {
		resp, err := idmintv1connect.NewAdminServiceClient(http.DefaultClient, url, o).ListTokens(ctx, connect.NewRequest(&idmintv1.ListTokensRequest{}))
		if err == nil && len(resp.Msg.GetTokens()) != 3 {
			return errors.New("ListTokens: want the fixture's 3 tokens")
		}
		return err
	}
}

func createToken(ctx context.Context, url string) func(connect.ClientOption) error {
	return func(o connect.ClientOption) error {
		_, err := idmintv1connect.NewAdminServiceClient(http.DefaultClient, url, o).CreateToken(ctx,
			connect.NewRequest(&idmintv1.CreateTokenRequest{Name: "mine", Scopes: []string{"admin"}}))
		return err
	}
}

func revokeToken(ctx context.Context, url string) func(connect.ClientOption) error {
	return func(o connect.ClientOption) error {
		_, err := idmintv1connect.NewAdminServiceClient(http.DefaultClient, url, o).RevokeToken(ctx,
			connect.NewRequest(&idmintv1.RevokeTokenRequest{Id: "aaaaaaaaaaaaaaaa"}))
		return err
	}
}

// TestService_Segments: a grant is once per request ID across protocols:
// the retry over Connect and the same request over HTTP/JSON get the same
// range; another holder key is refused; the tail goes back.
func TestService_Segments(t *testing.T) {
	f := newFixture(t, httpapi.AuthOpen)
	ctx := context.Background()
	c := idmintv1connect.NewSegmentServiceClient(http.DefaultClient, f.url)
	id := uuid.Must(uuid.NewV7()).String()
	key := strings.Repeat("k", 32)
	// The tag's own runway comes with the range, for the caller's buffer.
	admin := idmintv1connect.NewAdminServiceClient(http.DefaultClient, f.url, bearer(f.admin))
	if _, err := admin.UpdateTag(ctx, connect.NewRequest(&idmintv1.UpdateTagRequest{BizTag: "order", RunwaySeconds: proto.Float64(90)})); err != nil {
		t.Fatal(err)
	}
	grant := &idmintv1.GrantRangeRequest{BizTag: "order", Size: 50, RequestId: id, HolderKey: key}
	first, err := c.GrantRange(ctx, connect.NewRequest(grant))
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Msg; got.GetFirst() != 1 || got.GetLast() != 50 || got.GetRecovered() || got.GetRunwaySeconds() != 90 {
		t.Fatalf("grant %v, want 1..50, not recovered, the tag's 90 s runway", got)
	}
	again, err := c.GrantRange(ctx, connect.NewRequest(grant))
	if err != nil || again.Msg.GetFirst() != 1 || again.Msg.GetLast() != 50 || !again.Msg.GetRecovered() {
		t.Fatalf("retry: %v, %v; want 1..50 recovered", again, err)
	}
	body, _ := json.Marshal(map[string]any{"biz_tag": "order", "size": 50, "request_id": id, "holder_key": key})
	resp, err := http.Post(f.url+"/v1/segments", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var viaHTTP wire.SegmentResponse
	json.NewDecoder(resp.Body).Decode(&viaHTTP)
	resp.Body.Close()
	if viaHTTP.First != 1 || viaHTTP.Last != 50 || !viaHTTP.Recovered {
		t.Fatalf("the same request over HTTP: %+v, want 1..50 recovered", viaHTTP)
	}
	other := &idmintv1.GrantRangeRequest{BizTag: "order", Size: 50, RequestId: id, HolderKey: strings.Repeat("x", 32)}
	if _, err := c.GrantRange(ctx, connect.NewRequest(other)); connect.CodeOf(err) != connect.CodePermissionDenied || reason(err) != wire.CodeNotHolder {
		t.Fatalf("another holder key: %v, want PermissionDenied not_holder", err)
	}
	gb, err := c.GiveBack(ctx, connect.NewRequest(&idmintv1.GiveBackRequest{BizTag: "order", RequestId: id, HolderKey: key, First: 41, Last: 50}))
	if err != nil || !gb.Msg.GetGivenBack() {
		t.Fatalf("give-back: %v, %v; want given back", gb, err)
	}
	kept, err := c.GrantRange(ctx, connect.NewRequest(grant))
	if err != nil || kept.Msg.GetFirst() != 1 || kept.Msg.GetLast() != 40 {
		t.Fatalf("retry after the give-back: %v, %v; want 1..40", kept, err)
	}
	if _, err := c.GrantRange(ctx, connect.NewRequest(&idmintv1.GrantRangeRequest{BizTag: "order", RequestId: "nope", HolderKey: key})); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		reason(err) != wire.CodeInvalidRequestID {
		t.Fatalf("a bad request ID: %v, want InvalidArgument invalid_request_id", err)
	}
}

// TestService_Unavailable: a 503 with Retry-After is Unavailable with
// RetryInfo; the ErrorInfo names the request ID the caller sent.
func TestService_Unavailable(t *testing.T) {
	f := newFixture(t, httpapi.AuthOpen)
	f.alloc.Close(context.Background())
	req := connect.NewRequest(&idmintv1.NextIDRequest{BizTag: "order"})
	req.Header().Set("X-Request-Id", "req-42")
	_, err := idmintv1connect.NewIDServiceClient(http.DefaultClient, f.url).NextID(context.Background(), req)
	if connect.CodeOf(err) != connect.CodeUnavailable || reason(err) != wire.CodeShuttingDown || retryDelay(err) != time.Second {
		t.Fatalf("%v (reason %q, retry %v), want Unavailable shutting_down with RetryInfo 1s", err, reason(err), retryDelay(err))
	}
	if got := errorInfo(err).GetMetadata()["request_id"]; got != "req-42" {
		t.Fatalf("ErrorInfo request_id %q, want the caller's req-42", got)
	}
}

// TestService_Admin: the tag calls over Connect, as /v1/tags does them.
func TestService_Admin(t *testing.T) {
	f := newFixture(t, httpapi.AuthOpen)
	ctx := context.Background()
	c := idmintv1connect.NewAdminServiceClient(http.DefaultClient, f.url, bearer(f.admin))
	created, err := c.CreateTag(ctx, connect.NewRequest(&idmintv1.CreateTagRequest{BizTag: "user", Step: proto.Int64(20), Start: 100, Description: "users"}))
	if err != nil || created.Msg.GetTag().GetMaxId() != 99 || created.Msg.GetTag().GetStep() != 20 {
		t.Fatalf("CreateTag: %v, %v", created, err)
	}
	if _, err := c.CreateTag(ctx, connect.NewRequest(&idmintv1.CreateTagRequest{BizTag: "user", Step: proto.Int64(20)})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("CreateTag again: %v, want AlreadyExists", err)
	}
	step := int64(30)
	updated, err := c.UpdateTag(ctx, connect.NewRequest(&idmintv1.UpdateTagRequest{BizTag: "user", Step: &step, RunwaySeconds: proto.Float64(90)}))
	if err != nil || updated.Msg.GetTag().GetStep() != 30 || updated.Msg.GetTag().GetDescription() != "users" ||
		updated.Msg.GetTag().GetRunwaySeconds() != 90 || updated.Msg.GetTag().GetMaxStep() != 1_000_000 {
		t.Fatalf("UpdateTag: %v, %v; want step 30, runway 90 s, the description and default max_step kept", updated, err)
	}
	bumped, err := c.BumpTag(ctx, connect.NewRequest(&idmintv1.BumpTagRequest{BizTag: "user", To: 1000}))
	if err != nil || bumped.Msg.GetTag().GetMaxId() != 1000 {
		t.Fatalf("BumpTag: %v, %v", bumped, err)
	}
	got, err := c.GetTag(ctx, connect.NewRequest(&idmintv1.GetTagRequest{BizTag: "user"}))
	if err != nil || got.Msg.GetTag().GetMaxId() != 1000 {
		t.Fatalf("GetTag: %v, %v", got, err)
	}
	if _, err := c.GetTag(ctx, connect.NewRequest(&idmintv1.GetTagRequest{BizTag: "nope"})); connect.CodeOf(err) != connect.CodeNotFound || reason(err) != wire.CodeUnknownTag {
		t.Fatalf("GetTag(nope): %v, want NotFound unknown_tag", err)
	}
}

// TestService_Tokens: the token calls over Connect, as /v1/tokens does
// them: the secret in CreateToken's reply only, the token working at once
// for its scope, revoked idempotently, bad settings InvalidArgument.
func TestService_Tokens(t *testing.T) {
	f := newFixture(t, httpapi.AuthToken)
	ctx := context.Background()
	c := idmintv1connect.NewAdminServiceClient(http.DefaultClient, f.url, bearer(f.admin))
	created, err := c.CreateToken(ctx, connect.NewRequest(&idmintv1.CreateTokenRequest{Name: "billing", Scopes: []string{"ids:order"}, IdsPerSecond: 50}))
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	tok := created.Msg.GetToken()
	id, _, ok := token.Parse(created.Msg.GetSecret())
	if !ok || id != tok.GetId() || tok.GetName() != "billing" || tok.GetIdsPerSecond() != 50 || tok.GetCreatedAt() == nil ||
		tok.GetRevokedAt() != nil || !strings.Contains(created.Msg.GetNote(), "once") {
		t.Fatalf("CreateToken: %v", created.Msg)
	}
	if err := nextID(ctx, f.url, "order")(bearer(created.Msg.GetSecret())); err != nil {
		t.Fatalf("NextID with the new token: %v", err)
	}
	list, err := c.ListTokens(ctx, connect.NewRequest(&idmintv1.ListTokensRequest{}))
	if err != nil || len(list.Msg.GetTokens()) != 4 {
		t.Fatalf("ListTokens: %v, %v", list, err)
	}
	encoded, err := proto.Marshal(list.Msg)
	if err != nil || bytes.Contains(encoded, []byte(created.Msg.GetSecret()[21:])) {
		t.Fatalf("ListTokens shows the secret: %v", err)
	}
	if _, err := c.CreateToken(ctx, connect.NewRequest(&idmintv1.CreateTokenRequest{Name: "x", Scopes: []string{"root"}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("CreateToken with a bad scope: %v, want InvalidArgument", err)
	}
	revoked, err := c.RevokeToken(ctx, connect.NewRequest(&idmintv1.RevokeTokenRequest{Id: id}))
	if err != nil || revoked.Msg.GetToken().GetRevokedAt() == nil {
		t.Fatalf("RevokeToken: %v, %v", revoked, err)
	}
	if err := nextID(ctx, f.url, "order")(bearer(created.Msg.GetSecret())); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("NextID with the revoked token: %v, want Unauthenticated", err)
	}
	again, err := c.RevokeToken(ctx, connect.NewRequest(&idmintv1.RevokeTokenRequest{Id: id}))
	if err != nil || !again.Msg.GetToken().GetRevokedAt().AsTime().Equal(revoked.Msg.GetToken().GetRevokedAt().AsTime()) {
		t.Fatalf("RevokeToken again: %v, %v; want the first revocation", again, err)
	}
	if _, err := c.RevokeToken(ctx, connect.NewRequest(&idmintv1.RevokeTokenRequest{Id: "aaaaaaaaaaaaaaaa"})); connect.CodeOf(err) != connect.CodeNotFound || reason(err) != wire.CodeUnknownToken {
		t.Fatalf("RevokeToken(unknown): %v, want NotFound unknown_token", err)
	}
}

// TestService_NotServed: a procedure whose route the server leaves out
// (Snowflake without a node, the standbys without replication) is
// Unimplemented, and reflection does not list its service.
func TestService_NotServed(t *testing.T) {
	f := newFixture(t, httpapi.AuthOpen)
	_, err := idmintv1connect.NewSnowflakeServiceClient(http.DefaultClient, f.url).
		NextSnowflake(context.Background(), connect.NewRequest(&idmintv1.NextSnowflakeRequest{}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("NextSnowflake without Snowflake: %v, want Unimplemented", err)
	}
}

// TestService_Health: grpc.health.v1 follows /id/health: SERVING for ""
// and the idmint services served, NotFound for others, NOT_SERVING once
// /id/health answers 503 (here: the database check failing).
func TestService_Health(t *testing.T) {
	f := newFixture(t, httpapi.AuthOpen)
	ctx := context.Background()
	hc := grpchealth.NewClient(http.DefaultClient, f.url, connect.WithGRPC())
	for _, svc := range []string{"", idmintv1connect.IDServiceName, idmintv1connect.AdminServiceName} {
		resp, err := hc.Check(ctx, &grpchealth.CheckRequest{Service: svc})
		if err != nil || resp.Status != grpchealth.StatusServing {
			t.Fatalf("Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}
	if _, err := hc.Check(ctx, &grpchealth.CheckRequest{Service: idmintv1connect.SnowflakeServiceName}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Check(Snowflake, not served): %v, want NotFound", err)
	}
	f.down.Store(true)
	resp, err := hc.Check(ctx, &grpchealth.CheckRequest{})
	if err != nil || resp.Status != grpchealth.StatusNotServing {
		t.Fatalf("Check after close = %v, %v; want NOT_SERVING", resp, err)
	}
}

// withHeaders sends the header name-value pairs as metadata on every call.
func withHeaders(kv ...string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			for i := 0; i+1 < len(kv); i += 2 {
				req.Header().Add(kv[i], kv[i+1])
			}
			return next(ctx, req)
		}
	}))
}

// TestGateway_CallerHeaders: a procedure's route sees the call's peer
// address and its Authorization, nothing else of its metadata. A login
// cookie in the metadata lets no call in (it is for browsers on the
// monitoring pages only), and a forged X-Forwarded-For does not move a
// call to another address's rate limit.
func TestGateway_CallerHeaders(t *testing.T) {
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	tk, monitor, err := token.New("monitor", []string{"monitor"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateToken(ctx, tk); err != nil {
		t.Fatal(err)
	}
	alloc := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), Instance: "test"})
	t.Cleanup(func() { alloc.Close(context.Background()) })
	// A clock that stands still: the address's limit never refills.
	now := time.Now()
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: alloc, Logger: testlog.Discard(), Admin: m,
		Now:    func() time.Time { return now },
		Auth:   httpapi.AuthConfig{Tokens: m, ProtectMonitoring: true},
		Limits: httpapi.Limits{IDsPerSecondPerAddress: 1}, MaxCount: 10,
		RPC: rpcapi.New()}))
	t.Cleanup(srv.Close)

	t.Run("a login cookie is no credential for a call", func(t *testing.T) {
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noRedirect.PostForm(srv.URL+"/id/login", url.Values{"token": {monitor}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var session string
		for _, c := range resp.Cookies() {
			if c.Name == httpapi.MonitorCookie {
				session = c.Value
			}
		}
		if session == "" {
			t.Fatalf("login: %d, no login cookie", resp.StatusCode)
		}
		c := grpchealth.NewClient(http.DefaultClient, srv.URL, connect.WithGRPC(),
			withHeaders("Cookie", httpapi.MonitorCookie+"="+session))
		_, err = c.Check(ctx, &grpchealth.CheckRequest{})
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("health check with the login cookie only = %v, want Unauthenticated", err)
		}
		c = grpchealth.NewClient(http.DefaultClient, srv.URL, connect.WithGRPC(), bearer(monitor))
		if _, err := c.Check(ctx, &grpchealth.CheckRequest{}); err != nil {
			t.Fatalf("health check with the token as a bearer = %v", err)
		}
	})

	t.Run("X-Forwarded-For does not move a call to another address", func(t *testing.T) {
		var codes []connect.Code
		for i := range 3 {
			c := idmintv1connect.NewIDServiceClient(http.DefaultClient, srv.URL, connect.WithGRPC(),
				withHeaders("X-Forwarded-For", "192.0.2."+strconv.Itoa(i+1), "X-Real-Ip", "192.0.2."+strconv.Itoa(i+1)))
			_, err := c.NextIDs(ctx, connect.NewRequest(&idmintv1.NextIDsRequest{BizTag: "order", Count: 10}))
			code := connect.Code(0) // OK
			if err != nil {
				code = connect.CodeOf(err)
			}
			codes = append(codes, code)
		}
		// The limit's burst admits one request of the largest count
		// (10): the calls after it wait on the same address's limit.
		if codes[0] != 0 || codes[1] != connect.CodeResourceExhausted || codes[2] != connect.CodeResourceExhausted {
			t.Fatalf("codes of three calls of 10 ids under forged addresses = %v, want OK then ResourceExhausted twice", codes)
		}
	})
}
