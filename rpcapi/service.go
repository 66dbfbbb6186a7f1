package rpcapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/go-chi/chi/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/idmint/idmint/core"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// maxMessageBytes bounds a request message, as the HTTP API's Limits bound
// a body by default (64 KiB).
const maxMessageBytes = 64 << 10

// Service serves proto/idmint/v1 over gRPC, gRPC-Web and Connect: an
// adapter of the core (decode, call, encode), mounted on the HTTP API's
// router (set it as httpapi.Config.RPC).
type Service struct {
	core *core.Core
	// newDecompressor makes the gzip decompressors of calls' messages
	// (newBoundedGzip; tests count what it inflates).
	newDecompressor func() connect.Decompressor
}

// New returns the service, to be mounted by httpapi.NewServer.
func New() *Service { return &Service{newDecompressor: newBoundedGzip} }

// Mount adds, on r, every procedure the core c serves (operations), the
// health service and reflection (httpapi.Mounter). Each procedure's caller
// is prechecked against its operation's access control before its message
// is read (precheck), and a message is inflated no further than
// maxMessageBytes (boundedGzip).
func (s *Service) Mount(c *core.Core, r chi.Router) {
	s.core = c
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(maxMessageBytes),
		connect.WithCompression("gzip", s.newDecompressor, newGzipCompressor),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(s.mapErrors()),
	}
	refusals := connect.NewErrorWriter(opts...)
	gate := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := s.precheck(r.Context(), r.URL.Path, newCaller(r.Header.Values("Authorization"), r.RemoteAddr)); err != nil {
				refusals.Write(w, r, connectError(r.Context(), err))
				return
			}
			h.ServeHTTP(w, r)
		})
	}
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
		// A procedure whose operation the core leaves out (no
		// --snowflake, no admin store) is left out, which a client sees
		// as Unimplemented.
		if !op.served(c) {
			continue
		}
		service, _, _ := strings.Cut(strings.TrimPrefix(op.procedure, "/"), "/")
		// One route per procedure, so that the metrics count each.
		r.Handle(op.procedure, gate(handlers["/"+service+"/"]))
		if !seen[service] {
			seen[service] = true
			services = append(services, service)
		}
	}
	hc := &health{core: c, services: seen}
	path, h := grpchealth.NewHandler(hc, opts...)
	h = gate(withCaller(h))
	r.Handle(path+"Check", h)
	r.Handle(path+"Watch", h)
	reflector := grpcreflect.NewStaticReflector(append(services, grpchealth.HealthV1ServiceName)...)
	path, h = grpcreflect.NewHandlerV1(reflector, opts...)
	r.Handle(path+"ServerReflectionInfo", h)
	path, h = grpcreflect.NewHandlerV1Alpha(reflector, opts...)
	r.Handle(path+"ServerReflectionInfo", h)
}

// respond wraps a procedure's typed reply for connect-go; its error is
// mapped once, by Service.mapErrors.
func respond[T any](m *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(m), nil
}

// mapErrors turns the error of every call into its connect error
// (connectError): the one place, for the procedures and the health
// service alike; a failure on the server's side is logged (logFailure).
func (s *Service) mapErrors() connect.Interceptor {
	logger := s.core.Config().Logger
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err != nil {
				ce := connectError(ctx, err)
				logFailure(logger, req.Spec().Procedure, ce, err, core.RequestID(ctx))
				return nil, ce
			}
			return resp, nil
		}
	})
}

func timestamp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// ids serves IDService (core: NextID, NextIDs).
type ids struct{ s *Service }

func (h ids) NextID(ctx context.Context, req *connect.Request[idmintv1.NextIDRequest]) (*connect.Response[idmintv1.NextIDResponse], error) {
	return respond(h.nextID(ctx, callerOf(req), req.Msg))
}

func (h ids) nextID(ctx context.Context, c caller, m *idmintv1.NextIDRequest) (*idmintv1.NextIDResponse, error) {
	req := core.IDsRequest{Tag: m.GetBizTag()}
	id, err := h.s.core.NextID(ctx, c, req)
	if err != nil {
		return nil, err
	}
	return &idmintv1.NextIDResponse{BizTag: req.Tag, Id: id}, nil
}

func (h ids) NextIDs(ctx context.Context, req *connect.Request[idmintv1.NextIDsRequest]) (*connect.Response[idmintv1.NextIDsResponse], error) {
	return respond(h.nextIDs(ctx, callerOf(req), req.Msg))
}

func (h ids) nextIDs(ctx context.Context, c caller, m *idmintv1.NextIDsRequest) (*idmintv1.NextIDsResponse, error) {
	req := core.IDsRequest{Tag: m.GetBizTag(), Count: int(m.GetCount())}
	switch f := m.GetFormat(); {
	case req.Tag == "":
		req.Bad = core.ErrTagRequired
	case req.Count < 1 || req.Count > h.s.core.MaxCount():
		req.Bad = h.s.core.CountError()
	case f == idmintv1.Format_FORMAT_RANGES:
		req.Ranges = true
	case f != idmintv1.Format_FORMAT_UNSPECIFIED && f != idmintv1.Format_FORMAT_LIST:
		req.Bad = core.ErrFormat
	}
	ranges, err := h.s.core.NextIDs(ctx, c, req, nil)
	// IDs taken before an error are handed out (fewer than count) rather
	// than lost.
	if err != nil && len(ranges) == 0 {
		return nil, err
	}
	resp := &idmintv1.NextIDsResponse{BizTag: req.Tag, Ids: []int64{}}
	if req.Ranges {
		for _, rg := range ranges {
			resp.Ranges = append(resp.Ranges, &idmintv1.Range{First: rg.First, Last: rg.Last})
		}
		return resp, nil
	}
	resp.Ids = appendIDs(make([]int64, 0, count(ranges)), ranges)
	return resp, nil
}

// segments serves SegmentService (core: GrantRange, GiveBack), whose
// rules (request ID, holder key, the caller's principal) are the core's.
type segments struct{ s *Service }

func (h segments) GrantRange(ctx context.Context, req *connect.Request[idmintv1.GrantRangeRequest]) (*connect.Response[idmintv1.GrantRangeResponse], error) {
	return respond(h.grantRange(ctx, callerOf(req), req.Msg))
}

func (h segments) grantRange(ctx context.Context, c caller, m *idmintv1.GrantRangeRequest) (*idmintv1.GrantRangeResponse, error) {
	out, err := h.s.core.GrantRange(ctx, c, core.GrantRequest{SegmentRequest: wire.SegmentRequest{Tag: m.GetBizTag(),
		Size: m.GetSize(), RequestID: m.GetRequestId(), HolderKey: m.GetHolderKey(), Floor: m.GetFloor()}})
	if err != nil {
		return nil, err
	}
	return &idmintv1.GrantRangeResponse{BizTag: out.Tag, RequestId: out.RequestID, First: out.First,
		Last: out.Last, Step: out.Step, MaxStep: out.MaxStep, Recovered: out.Recovered, RunwaySeconds: out.RunwaySeconds,
		Region: regionShare(out.Region)}, nil
}

// regionShare is a range reply's share in the schema's shape (nil: none).
func regionShare(s *wire.Share) *idmintv1.RegionShare {
	if s == nil {
		return nil
	}
	out := &idmintv1.RegionShare{Name: s.Name, WorkerSlot: int32(s.WorkerSlot), WorkerSlots: int32(s.WorkerSlots)}
	for _, e := range s.Epochs {
		out.Epochs = append(out.Epochs, &idmintv1.RegionEpoch{From: e.From, To: e.To, Block: e.Block, Regions: e.Regions, Index: int32(e.Index)})
	}
	return out
}

func (h segments) GiveBack(ctx context.Context, req *connect.Request[idmintv1.GiveBackRequest]) (*connect.Response[idmintv1.GiveBackResponse], error) {
	return respond(h.giveBack(ctx, callerOf(req), req.Msg))
}

func (h segments) giveBack(ctx context.Context, c caller, m *idmintv1.GiveBackRequest) (*idmintv1.GiveBackResponse, error) {
	out, err := h.s.core.GiveBack(ctx, c, core.GiveBackRequest{GiveBackRequest: wire.GiveBackRequest{Tag: m.GetBizTag(),
		RequestID: m.GetRequestId(), HolderKey: m.GetHolderKey(), First: m.GetFirst(), Last: m.GetLast()}})
	if err != nil {
		return nil, err
	}
	return &idmintv1.GiveBackResponse{BizTag: out.Tag, RequestId: out.RequestID, First: out.First,
		Last: out.Last, GivenBack: out.GivenBack}, nil
}

// snowflakes serves SnowflakeService (core: NextSnowflake,
// NextSnowflakes, ParseSnowflake).
type snowflakes struct{ s *Service }

func (h snowflakes) NextSnowflake(ctx context.Context, req *connect.Request[idmintv1.NextSnowflakeRequest]) (*connect.Response[idmintv1.NextSnowflakeResponse], error) {
	return respond(h.nextSnowflake(ctx, callerOf(req), req.Msg))
}

func (h snowflakes) nextSnowflake(ctx context.Context, c caller, m *idmintv1.NextSnowflakeRequest) (*idmintv1.NextSnowflakeResponse, error) {
	id, err := h.s.core.NextSnowflake(ctx, c)
	if err != nil {
		return nil, err
	}
	return &idmintv1.NextSnowflakeResponse{Id: id}, nil
}

func (h snowflakes) NextSnowflakes(ctx context.Context, req *connect.Request[idmintv1.NextSnowflakesRequest]) (*connect.Response[idmintv1.NextSnowflakesResponse], error) {
	return respond(h.nextSnowflakes(ctx, callerOf(req), req.Msg))
}

func (h snowflakes) nextSnowflakes(ctx context.Context, c caller, m *idmintv1.NextSnowflakesRequest) (*idmintv1.NextSnowflakesResponse, error) {
	ids, err := h.s.core.NextSnowflakes(ctx, c, int(m.GetCount()), nil)
	if err != nil {
		return nil, err
	}
	return &idmintv1.NextSnowflakesResponse{Ids: ids}, nil
}

func (h snowflakes) ParseSnowflake(ctx context.Context, req *connect.Request[idmintv1.ParseSnowflakeRequest]) (*connect.Response[idmintv1.ParseSnowflakeResponse], error) {
	return respond(h.parseSnowflake(ctx, callerOf(req), req.Msg))
}

func (h snowflakes) parseSnowflake(ctx context.Context, c caller, m *idmintv1.ParseSnowflakeRequest) (*idmintv1.ParseSnowflakeResponse, error) {
	p, err := h.s.core.ParseSnowflake(ctx, c, strconv.FormatInt(m.GetId(), 10))
	if err != nil {
		return nil, err
	}
	return &idmintv1.ParseSnowflakeResponse{Id: p.ID, Time: timestamppb.New(p.Time), UnixMs: p.UnixMS, WorkerId: p.WorkerID,
		Sequence: p.Sequence, Layout: p.Layout, Epoch: timestamppb.New(p.Epoch)}, nil
}

// admin serves AdminService (core: the tag, token and standby
// operations).
type admin struct{ s *Service }

func (h admin) ListTags(ctx context.Context, req *connect.Request[idmintv1.ListTagsRequest]) (*connect.Response[idmintv1.ListTagsResponse], error) {
	return respond(h.listTags(ctx, callerOf(req), req.Msg))
}

func (h admin) listTags(ctx context.Context, c caller, m *idmintv1.ListTagsRequest) (*idmintv1.ListTagsResponse, error) {
	out, err := h.s.core.ListTags(ctx, c)
	if err != nil {
		return nil, err
	}
	resp := &idmintv1.ListTagsResponse{Tags: make([]*idmintv1.Tag, 0, len(out.Tags))}
	for _, t := range out.Tags {
		resp.Tags = append(resp.Tags, tagOf(t))
	}
	return resp, nil
}

func (h admin) CreateTag(ctx context.Context, req *connect.Request[idmintv1.CreateTagRequest]) (*connect.Response[idmintv1.CreateTagResponse], error) {
	return respond(h.createTag(ctx, callerOf(req), req.Msg))
}

func (h admin) createTag(ctx context.Context, c caller, m *idmintv1.CreateTagRequest) (*idmintv1.CreateTagResponse, error) {
	t, err := h.s.core.CreateTag(ctx, c, wire.CreateTagRequest{Tag: m.GetBizTag(), Step: m.Step, MaxStep: m.MaxStep,
		Start: m.GetStart(), Description: m.GetDescription(), RunwaySeconds: m.GetRunwaySeconds()}, nil)
	if err != nil {
		return nil, err
	}
	return &idmintv1.CreateTagResponse{Tag: tagOf(t)}, nil
}

func (h admin) GetTag(ctx context.Context, req *connect.Request[idmintv1.GetTagRequest]) (*connect.Response[idmintv1.GetTagResponse], error) {
	return respond(h.getTag(ctx, callerOf(req), req.Msg))
}

func (h admin) getTag(ctx context.Context, c caller, m *idmintv1.GetTagRequest) (*idmintv1.GetTagResponse, error) {
	t, err := h.s.core.GetTag(ctx, c, m.GetBizTag())
	if err != nil {
		return nil, err
	}
	return &idmintv1.GetTagResponse{Tag: tagOf(t)}, nil
}

func (h admin) UpdateTag(ctx context.Context, req *connect.Request[idmintv1.UpdateTagRequest]) (*connect.Response[idmintv1.UpdateTagResponse], error) {
	return respond(h.updateTag(ctx, callerOf(req), req.Msg))
}

func (h admin) updateTag(ctx context.Context, c caller, m *idmintv1.UpdateTagRequest) (*idmintv1.UpdateTagResponse, error) {
	t, err := h.s.core.UpdateTag(ctx, c, m.GetBizTag(), wire.PatchTagRequest{Step: m.Step, MaxStep: m.MaxStep,
		Description: m.Description, RunwaySeconds: m.RunwaySeconds}, nil)
	if err != nil {
		return nil, err
	}
	return &idmintv1.UpdateTagResponse{Tag: tagOf(t)}, nil
}

func (h admin) BumpTag(ctx context.Context, req *connect.Request[idmintv1.BumpTagRequest]) (*connect.Response[idmintv1.BumpTagResponse], error) {
	return respond(h.bumpTag(ctx, callerOf(req), req.Msg))
}

func (h admin) bumpTag(ctx context.Context, c caller, m *idmintv1.BumpTagRequest) (*idmintv1.BumpTagResponse, error) {
	t, err := h.s.core.BumpTag(ctx, c, m.GetBizTag(), wire.BumpRequest{To: m.GetTo(), By: m.GetBy()}, nil)
	if err != nil {
		return nil, err
	}
	return &idmintv1.BumpTagResponse{Tag: tagOf(t)}, nil
}

func (h admin) ListTokens(ctx context.Context, req *connect.Request[idmintv1.ListTokensRequest]) (*connect.Response[idmintv1.ListTokensResponse], error) {
	return respond(h.listTokens(ctx, callerOf(req), req.Msg))
}

func (h admin) listTokens(ctx context.Context, c caller, m *idmintv1.ListTokensRequest) (*idmintv1.ListTokensResponse, error) {
	out, err := h.s.core.ListTokens(ctx, c)
	if err != nil {
		return nil, err
	}
	resp := &idmintv1.ListTokensResponse{Tokens: make([]*idmintv1.Token, 0, len(out.Tokens))}
	for _, t := range out.Tokens {
		resp.Tokens = append(resp.Tokens, tokenOf(t))
	}
	return resp, nil
}

func (h admin) CreateToken(ctx context.Context, req *connect.Request[idmintv1.CreateTokenRequest]) (*connect.Response[idmintv1.CreateTokenResponse], error) {
	return respond(h.createToken(ctx, callerOf(req), req.Msg))
}

func (h admin) createToken(ctx context.Context, c caller, m *idmintv1.CreateTokenRequest) (*idmintv1.CreateTokenResponse, error) {
	out, err := h.s.core.CreateToken(ctx, c, wire.CreateTokenRequest{Name: m.GetName(), Scopes: m.GetScopes(), IDsPerSecond: m.GetIdsPerSecond()}, nil)
	if err != nil {
		return nil, err
	}
	return &idmintv1.CreateTokenResponse{Token: tokenOf(out.Token), Secret: out.Secret, Note: out.Note}, nil
}

func (h admin) RevokeToken(ctx context.Context, req *connect.Request[idmintv1.RevokeTokenRequest]) (*connect.Response[idmintv1.RevokeTokenResponse], error) {
	return respond(h.revokeToken(ctx, callerOf(req), req.Msg))
}

func (h admin) revokeToken(ctx context.Context, c caller, m *idmintv1.RevokeTokenRequest) (*idmintv1.RevokeTokenResponse, error) {
	t, err := h.s.core.RevokeToken(ctx, c, m.GetId())
	if err != nil {
		return nil, err
	}
	return &idmintv1.RevokeTokenResponse{Token: tokenOf(t)}, nil
}

func (h admin) ListStandbys(ctx context.Context, req *connect.Request[idmintv1.ListStandbysRequest]) (*connect.Response[idmintv1.ListStandbysResponse], error) {
	return respond(h.listStandbys(ctx, callerOf(req), req.Msg))
}

func (h admin) listStandbys(ctx context.Context, c caller, m *idmintv1.ListStandbysRequest) (*idmintv1.ListStandbysResponse, error) {
	out, err := h.s.core.ListStandbys(ctx, c)
	if err != nil {
		return nil, err
	}
	resp := &idmintv1.ListStandbysResponse{Standbys: make([]*idmintv1.Standby, 0, len(out.Standbys))}
	for _, r := range out.Standbys {
		resp.Standbys = append(resp.Standbys, &idmintv1.Standby{Name: r.Name, Slot: r.Slot, Timeline: r.Timeline,
			FirstSeen: timestamppb.New(r.FirstSeen), LastSeen: timestamppb.New(r.LastSeen), LastFlushLsn: r.LastFlushLSN,
			ForgottenAt: timestamp(r.ForgottenAt)})
	}
	return resp, nil
}

func (h admin) ForgetStandby(ctx context.Context, req *connect.Request[idmintv1.ForgetStandbyRequest]) (*connect.Response[idmintv1.ForgetStandbyResponse], error) {
	return respond(h.forgetStandby(ctx, callerOf(req), req.Msg))
}

func (h admin) forgetStandby(ctx context.Context, c caller, m *idmintv1.ForgetStandbyRequest) (*idmintv1.ForgetStandbyResponse, error) {
	if err := h.s.core.ForgetStandby(ctx, c, m.GetName()); err != nil {
		return nil, err
	}
	return &idmintv1.ForgetStandbyResponse{}, nil
}

// count is the number of IDs in ranges.
func count(ranges []segment.Range) int {
	n := 0
	for _, r := range ranges {
		n += int(r.Len())
	}
	return n
}

// appendIDs appends every ID of ranges to ids. The loop ends on Last, not
// past it: past 2^63-1, id++ wraps.
func appendIDs(ids []int64, ranges []segment.Range) []int64 {
	for _, r := range ranges {
		for id := r.First; ; id++ {
			ids = append(ids, id)
			if id == r.Last {
				break
			}
		}
	}
	return ids
}

func tagOf(t wire.Tag) *idmintv1.Tag {
	return &idmintv1.Tag{BizTag: t.Tag, MaxId: t.MaxID, Step: t.Step, MaxStep: t.MaxStep, Description: t.Description,
		RunwaySeconds: t.RunwaySeconds}
}

func tokenOf(t wire.Token) *idmintv1.Token {
	return &idmintv1.Token{Id: t.ID, Name: t.Name, Scopes: t.Scopes, IdsPerSecond: t.IDsPerSecond,
		CreatedAt: timestamppb.New(t.CreatedAt), RevokedAt: timestamp(t.RevokedAt)}
}
