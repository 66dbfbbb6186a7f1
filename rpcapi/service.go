package rpcapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/go-chi/chi/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/wire"
)

// maxMessageBytes bounds a request message, as httpapi's Limits bound a
// body by default (64 KiB); the route checks the body it is given again.
const maxMessageBytes = 64 << 10

// Service serves proto/idmint/v1 over gRPC, gRPC-Web and Connect on an
// httpapi.Server's router: set it as httpapi.Config.RPC.
type Service struct {
	gw gateway
	// srv is the server Mount mounted the service on (precheck, and the
	// grpc-go listener's calls).
	srv *httpapi.Server
	// newDecompressor makes the gzip decompressors of calls' messages
	// (newBoundedGzip; tests count what it inflates).
	newDecompressor func() connect.Decompressor
}

var _ httpapi.Mounter = (*Service)(nil)

// New returns the service, to be mounted by httpapi.NewServer.
func New() *Service { return &Service{newDecompressor: newBoundedGzip} }

// Mount implements httpapi.Mounter: it adds every procedure whose HTTP
// route r serves, the health service and reflection. Each procedure's
// caller is checked against its route's access control (srv.Precheck)
// before its message is read, and a message is inflated no further than
// maxMessageBytes (boundedGzip).
func (s *Service) Mount(srv *httpapi.Server, r chi.Router) {
	s.gw.router = r
	s.srv = srv
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(maxMessageBytes),
		connect.WithCompression("gzip", s.newDecompressor, newGzipCompressor),
		connect.WithCompressMinBytes(compressMinBytes),
	}
	refusals := connect.NewErrorWriter(opts...)
	gate := func(a httpapi.Access, h http.Handler) http.Handler { return precheck(srv, refusals, a, h) }
	handlers := map[string]http.Handler{}
	for _, mount := range []func(...connect.HandlerOption) (string, http.Handler){
		func(o ...connect.HandlerOption) (string, http.Handler) {
			return idmintv1connect.NewIDServiceHandler(ids{s}, o...)
		},
		func(o ...connect.HandlerOption) (string, http.Handler) {
			return idmintv1connect.NewSegmentServiceHandler(segments{s}, o...)
		},
		func(o ...connect.HandlerOption) (string, http.Handler) {
			return idmintv1connect.NewSnowflakeServiceHandler(snowflakes{s}, o...)
		},
		func(o ...connect.HandlerOption) (string, http.Handler) {
			return idmintv1connect.NewAdminServiceHandler(admin{s}, o...)
		},
	} {
		prefix, h := mount(opts...)
		handlers[prefix] = h
	}
	var services []string
	seen := map[string]bool{}
	for _, op := range operations {
		// Served when the router has the route: a route the server
		// leaves out (no --snowflake, no admin store) leaves its
		// procedure out, which a client sees as Unimplemented.
		path := strings.ReplaceAll(strings.ReplaceAll(op.path, "{biz_tag}", "t"), "{name}", "n")
		if !r.Match(chi.NewRouteContext(), op.method, path) {
			continue
		}
		service, _, _ := strings.Cut(strings.TrimPrefix(op.procedure, "/"), "/")
		r.Handle(op.procedure, gate(op.access, handlers["/"+service+"/"]))
		if !seen[service] {
			seen[service] = true
			services = append(services, service)
		}
	}
	hc := &health{gw: &s.gw, services: seen}
	// One route per procedure, so that the metrics count each.
	path, h := grpchealth.NewHandler(hc, opts...)
	h = gate(httpapi.AccessMonitoring, withOuterRequest(h))
	r.Handle(path+"Check", h)
	r.Handle(path+"Watch", h)
	reflector := grpcreflect.NewStaticReflector(append(services, grpchealth.HealthV1ServiceName)...)
	path, h = grpcreflect.NewHandlerV1(reflector, opts...)
	r.Handle(path+"ServerReflectionInfo", h)
	path, h = grpcreflect.NewHandlerV1Alpha(reflector, opts...)
	r.Handle(path+"ServerReflectionInfo", h)
}

// unmarshal decodes a route's JSON reply into a message: the API's JSON
// names are the schema's field names; fields the schema does not know are
// dropped.
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

func decodeInto(m proto.Message) func([]byte) error {
	return func(b []byte) error { return unmarshal.Unmarshal(b, m) }
}

// respond wraps a procedure's typed reply for connect-go.
func respond[T any](m *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(m), nil
}

// ids serves IDService: GET /id and GET /ids.
type ids struct{ s *Service }

func (h ids) NextID(ctx context.Context, req *connect.Request[idmintv1.NextIDRequest]) (*connect.Response[idmintv1.NextIDResponse], error) {
	return respond(h.nextID(ctx, callerOf(req), req.Msg))
}

func (h ids) nextID(ctx context.Context, c caller, m *idmintv1.NextIDRequest) (*idmintv1.NextIDResponse, error) {
	tag := m.GetBizTag()
	var out struct {
		ID int64 `json:"id,string"`
	}
	err := h.s.gw.call(ctx, c, http.MethodGet, "/id?biz_tag="+url.QueryEscape(tag), nil,
		func(b []byte) error { return json.Unmarshal(b, &out) })
	if err != nil {
		return nil, err
	}
	return &idmintv1.NextIDResponse{BizTag: tag, Id: out.ID}, nil
}

func (h ids) NextIDs(ctx context.Context, req *connect.Request[idmintv1.NextIDsRequest]) (*connect.Response[idmintv1.NextIDsResponse], error) {
	return respond(h.nextIDs(ctx, callerOf(req), req.Msg))
}

func (h ids) nextIDs(ctx context.Context, c caller, m *idmintv1.NextIDsRequest) (*idmintv1.NextIDsResponse, error) {
	q := url.Values{"biz_tag": {m.GetBizTag()}, "count": {strconv.Itoa(int(m.GetCount()))}}
	switch f := m.GetFormat(); f {
	case idmintv1.Format_FORMAT_UNSPECIFIED:
	case idmintv1.Format_FORMAT_LIST:
		q.Set("format", "list")
	case idmintv1.Format_FORMAT_RANGES:
		q.Set("format", "ranges")
	default:
		q.Set("format", strconv.Itoa(int(f))) // the route refuses it
	}
	var out struct {
		IDs    []json.Number    `json:"ids"`
		Ranges [][2]json.Number `json:"ranges"`
	}
	err := h.s.gw.call(ctx, c, http.MethodGet, "/ids?"+q.Encode(), nil,
		func(b []byte) error { return json.Unmarshal(b, &out) })
	if err != nil {
		return nil, err
	}
	resp := &idmintv1.NextIDsResponse{BizTag: m.GetBizTag(), Ids: make([]int64, 0, len(out.IDs))}
	for _, n := range out.IDs {
		id, err := n.Int64()
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		resp.Ids = append(resp.Ids, id)
	}
	for _, rg := range out.Ranges {
		first, err1 := rg[0].Int64()
		last, err2 := rg[1].Int64()
		if err1 != nil || err2 != nil {
			return nil, connect.NewError(connect.CodeInternal, errBadReply)
		}
		resp.Ranges = append(resp.Ranges, &idmintv1.Range{First: first, Last: last})
	}
	return resp, nil
}

// segments serves SegmentService: POST /v1/segments and
// /v1/segments/giveback, whose rules (request ID, holder key, the
// caller's principal) are the route's.
type segments struct{ s *Service }

func (h segments) GrantRange(ctx context.Context, req *connect.Request[idmintv1.GrantRangeRequest]) (*connect.Response[idmintv1.GrantRangeResponse], error) {
	return respond(h.grantRange(ctx, callerOf(req), req.Msg))
}

func (h segments) grantRange(ctx context.Context, c caller, m *idmintv1.GrantRangeRequest) (*idmintv1.GrantRangeResponse, error) {
	body, err := json.Marshal(wire.SegmentRequest{Tag: m.GetBizTag(), Size: m.GetSize(), RequestID: m.GetRequestId(),
		HolderKey: m.GetHolderKey(), Floor: m.GetFloor()})
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	var out wire.SegmentResponse
	if err := h.s.gw.call(ctx, c, http.MethodPost, wire.PathSegments, body,
		func(b []byte) error { return json.Unmarshal(b, &out) }); err != nil {
		return nil, err
	}
	return &idmintv1.GrantRangeResponse{BizTag: out.Tag, RequestId: out.RequestID, First: out.First,
		Last: out.Last, Step: out.Step, MaxStep: out.MaxStep, Recovered: out.Recovered, RunwaySeconds: out.RunwaySeconds}, nil
}

func (h segments) GiveBack(ctx context.Context, req *connect.Request[idmintv1.GiveBackRequest]) (*connect.Response[idmintv1.GiveBackResponse], error) {
	return respond(h.giveBack(ctx, callerOf(req), req.Msg))
}

func (h segments) giveBack(ctx context.Context, c caller, m *idmintv1.GiveBackRequest) (*idmintv1.GiveBackResponse, error) {
	body, err := json.Marshal(wire.GiveBackRequest{Tag: m.GetBizTag(), RequestID: m.GetRequestId(),
		HolderKey: m.GetHolderKey(), First: m.GetFirst(), Last: m.GetLast()})
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	var out wire.GiveBackResponse
	if err := h.s.gw.call(ctx, c, http.MethodPost, wire.PathGiveBack, body,
		func(b []byte) error { return json.Unmarshal(b, &out) }); err != nil {
		return nil, err
	}
	return &idmintv1.GiveBackResponse{BizTag: out.Tag, RequestId: out.RequestID, First: out.First,
		Last: out.Last, GivenBack: out.GivenBack}, nil
}

// snowflakes serves SnowflakeService: /snowflake, /snowflakes and
// /snowflake/parse.
type snowflakes struct{ s *Service }

func (h snowflakes) NextSnowflake(ctx context.Context, req *connect.Request[idmintv1.NextSnowflakeRequest]) (*connect.Response[idmintv1.NextSnowflakeResponse], error) {
	return respond(h.nextSnowflake(ctx, callerOf(req), req.Msg))
}

func (h snowflakes) nextSnowflake(ctx context.Context, c caller, m *idmintv1.NextSnowflakeRequest) (*idmintv1.NextSnowflakeResponse, error) {
	out := new(idmintv1.NextSnowflakeResponse)
	if err := h.s.gw.call(ctx, c, http.MethodGet, "/snowflake", nil, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h snowflakes) NextSnowflakes(ctx context.Context, req *connect.Request[idmintv1.NextSnowflakesRequest]) (*connect.Response[idmintv1.NextSnowflakesResponse], error) {
	return respond(h.nextSnowflakes(ctx, callerOf(req), req.Msg))
}

func (h snowflakes) nextSnowflakes(ctx context.Context, c caller, m *idmintv1.NextSnowflakesRequest) (*idmintv1.NextSnowflakesResponse, error) {
	out := new(idmintv1.NextSnowflakesResponse)
	target := "/snowflakes?count=" + strconv.Itoa(int(m.GetCount()))
	if err := h.s.gw.call(ctx, c, http.MethodGet, target, nil, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h snowflakes) ParseSnowflake(ctx context.Context, req *connect.Request[idmintv1.ParseSnowflakeRequest]) (*connect.Response[idmintv1.ParseSnowflakeResponse], error) {
	return respond(h.parseSnowflake(ctx, callerOf(req), req.Msg))
}

func (h snowflakes) parseSnowflake(ctx context.Context, c caller, m *idmintv1.ParseSnowflakeRequest) (*idmintv1.ParseSnowflakeResponse, error) {
	out := new(idmintv1.ParseSnowflakeResponse)
	target := "/snowflake/parse?id=" + strconv.FormatInt(m.GetId(), 10)
	if err := h.s.gw.call(ctx, c, http.MethodGet, target, nil, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// admin serves AdminService: /v1/tags, /v1/tokens and /v1/standbys.
type admin struct{ s *Service }

func tagPath(tag string) string { return "/v1/tags/" + url.PathEscape(tag) }

// tagCall runs a route whose reply is one tag.
func (h admin) tagCall(ctx context.Context, c caller, method, target string, body any) (*idmintv1.Tag, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	t := new(idmintv1.Tag)
	if err := h.s.gw.call(ctx, c, method, target, b, decodeInto(t)); err != nil {
		return nil, err
	}
	return t, nil
}

func (h admin) ListTags(ctx context.Context, req *connect.Request[idmintv1.ListTagsRequest]) (*connect.Response[idmintv1.ListTagsResponse], error) {
	return respond(h.listTags(ctx, callerOf(req), req.Msg))
}

func (h admin) listTags(ctx context.Context, c caller, m *idmintv1.ListTagsRequest) (*idmintv1.ListTagsResponse, error) {
	out := new(idmintv1.ListTagsResponse)
	if err := h.s.gw.call(ctx, c, http.MethodGet, "/v1/tags", nil, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h admin) CreateTag(ctx context.Context, req *connect.Request[idmintv1.CreateTagRequest]) (*connect.Response[idmintv1.CreateTagResponse], error) {
	return respond(h.createTag(ctx, callerOf(req), req.Msg))
}

func (h admin) createTag(ctx context.Context, c caller, m *idmintv1.CreateTagRequest) (*idmintv1.CreateTagResponse, error) {
	body := map[string]any{"biz_tag": m.GetBizTag(), "start": m.GetStart(), "description": m.GetDescription(),
		"runway_seconds": m.GetRunwaySeconds()}
	if m.Step != nil {
		body["step"] = m.GetStep()
	}
	if m.MaxStep != nil {
		body["max_step"] = m.GetMaxStep()
	}
	t, err := h.tagCall(ctx, c, http.MethodPost, "/v1/tags", body)
	if err != nil {
		return nil, err
	}
	return &idmintv1.CreateTagResponse{Tag: t}, nil
}

func (h admin) GetTag(ctx context.Context, req *connect.Request[idmintv1.GetTagRequest]) (*connect.Response[idmintv1.GetTagResponse], error) {
	return respond(h.getTag(ctx, callerOf(req), req.Msg))
}

func (h admin) getTag(ctx context.Context, c caller, m *idmintv1.GetTagRequest) (*idmintv1.GetTagResponse, error) {
	t, err := h.tagCall(ctx, c, http.MethodGet, tagPath(m.GetBizTag()), nil)
	if err != nil {
		return nil, err
	}
	return &idmintv1.GetTagResponse{Tag: t}, nil
}

func (h admin) UpdateTag(ctx context.Context, req *connect.Request[idmintv1.UpdateTagRequest]) (*connect.Response[idmintv1.UpdateTagResponse], error) {
	return respond(h.updateTag(ctx, callerOf(req), req.Msg))
}

func (h admin) updateTag(ctx context.Context, c caller, m *idmintv1.UpdateTagRequest) (*idmintv1.UpdateTagResponse, error) {
	patch := map[string]any{}
	if m.Step != nil {
		patch["step"] = m.GetStep()
	}
	if m.MaxStep != nil {
		patch["max_step"] = m.GetMaxStep()
	}
	if m.Description != nil {
		patch["description"] = m.GetDescription()
	}
	if m.RunwaySeconds != nil {
		patch["runway_seconds"] = m.GetRunwaySeconds()
	}
	t, err := h.tagCall(ctx, c, http.MethodPatch, tagPath(m.GetBizTag()), patch)
	if err != nil {
		return nil, err
	}
	return &idmintv1.UpdateTagResponse{Tag: t}, nil
}

func (h admin) BumpTag(ctx context.Context, req *connect.Request[idmintv1.BumpTagRequest]) (*connect.Response[idmintv1.BumpTagResponse], error) {
	return respond(h.bumpTag(ctx, callerOf(req), req.Msg))
}

func (h admin) bumpTag(ctx context.Context, c caller, m *idmintv1.BumpTagRequest) (*idmintv1.BumpTagResponse, error) {
	t, err := h.tagCall(ctx, c, http.MethodPost, tagPath(m.GetBizTag())+"/bump", map[string]any{"to": m.GetTo(), "by": m.GetBy()})
	if err != nil {
		return nil, err
	}
	return &idmintv1.BumpTagResponse{Tag: t}, nil
}

func (h admin) ListTokens(ctx context.Context, req *connect.Request[idmintv1.ListTokensRequest]) (*connect.Response[idmintv1.ListTokensResponse], error) {
	return respond(h.listTokens(ctx, callerOf(req), req.Msg))
}

func (h admin) listTokens(ctx context.Context, c caller, m *idmintv1.ListTokensRequest) (*idmintv1.ListTokensResponse, error) {
	out := new(idmintv1.ListTokensResponse)
	if err := h.s.gw.call(ctx, c, http.MethodGet, "/v1/tokens", nil, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h admin) CreateToken(ctx context.Context, req *connect.Request[idmintv1.CreateTokenRequest]) (*connect.Response[idmintv1.CreateTokenResponse], error) {
	return respond(h.createToken(ctx, callerOf(req), req.Msg))
}

func (h admin) createToken(ctx context.Context, c caller, m *idmintv1.CreateTokenRequest) (*idmintv1.CreateTokenResponse, error) {
	body, err := json.Marshal(httpapi.CreateTokenRequest{Name: m.GetName(), Scopes: m.GetScopes(), IDsPerSecond: m.GetIdsPerSecond()})
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := new(idmintv1.CreateTokenResponse)
	if err := h.s.gw.call(ctx, c, http.MethodPost, "/v1/tokens", body, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h admin) RevokeToken(ctx context.Context, req *connect.Request[idmintv1.RevokeTokenRequest]) (*connect.Response[idmintv1.RevokeTokenResponse], error) {
	return respond(h.revokeToken(ctx, callerOf(req), req.Msg))
}

func (h admin) revokeToken(ctx context.Context, c caller, m *idmintv1.RevokeTokenRequest) (*idmintv1.RevokeTokenResponse, error) {
	t := new(idmintv1.Token)
	target := "/v1/tokens/" + url.PathEscape(m.GetId())
	if err := h.s.gw.call(ctx, c, http.MethodDelete, target, nil, decodeInto(t)); err != nil {
		return nil, err
	}
	return &idmintv1.RevokeTokenResponse{Token: t}, nil
}

func (h admin) ListStandbys(ctx context.Context, req *connect.Request[idmintv1.ListStandbysRequest]) (*connect.Response[idmintv1.ListStandbysResponse], error) {
	return respond(h.listStandbys(ctx, callerOf(req), req.Msg))
}

func (h admin) listStandbys(ctx context.Context, c caller, m *idmintv1.ListStandbysRequest) (*idmintv1.ListStandbysResponse, error) {
	out := new(idmintv1.ListStandbysResponse)
	if err := h.s.gw.call(ctx, c, http.MethodGet, "/v1/standbys", nil, decodeInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h admin) ForgetStandby(ctx context.Context, req *connect.Request[idmintv1.ForgetStandbyRequest]) (*connect.Response[idmintv1.ForgetStandbyResponse], error) {
	return respond(h.forgetStandby(ctx, callerOf(req), req.Msg))
}

func (h admin) forgetStandby(ctx context.Context, c caller, m *idmintv1.ForgetStandbyRequest) (*idmintv1.ForgetStandbyResponse, error) {
	target := "/v1/standbys/" + url.PathEscape(m.GetName())
	if err := h.s.gw.call(ctx, c, http.MethodDelete, target, nil, nil); err != nil {
		return nil, err
	}
	return &idmintv1.ForgetStandbyResponse{}, nil
}
