package rpcapi

import (
	"context"

	"connectrpc.com/grpchealth"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
)

// The grpc-go services: each method calls the typed procedure with the
// call's caller (the tap's), as the connect-go handlers do with theirs.
// They embed the Unsafe… interfaces, not Unimplemented…, so that a
// procedure added to the schema without its method here does not compile
// (instead of answering Unimplemented on the listener only).

// grpcIDs serves IDService on the grpc-go listener.
type grpcIDs struct {
	idmintv1.UnsafeIDServiceServer
	h ids
}

var _ idmintv1.IDServiceServer = grpcIDs{}

func (g grpcIDs) NextID(ctx context.Context, m *idmintv1.NextIDRequest) (*idmintv1.NextIDResponse, error) {
	return g.h.nextID(ctx, callerOfContext(ctx), m)
}

func (g grpcIDs) NextIDs(ctx context.Context, m *idmintv1.NextIDsRequest) (*idmintv1.NextIDsResponse, error) {
	return g.h.nextIDs(ctx, callerOfContext(ctx), m)
}

// grpcSegments serves SegmentService on the grpc-go listener.
type grpcSegments struct {
	idmintv1.UnsafeSegmentServiceServer
	h segments
}

var _ idmintv1.SegmentServiceServer = grpcSegments{}

func (g grpcSegments) GrantRange(ctx context.Context, m *idmintv1.GrantRangeRequest) (*idmintv1.GrantRangeResponse, error) {
	return g.h.grantRange(ctx, callerOfContext(ctx), m)
}

func (g grpcSegments) GiveBack(ctx context.Context, m *idmintv1.GiveBackRequest) (*idmintv1.GiveBackResponse, error) {
	return g.h.giveBack(ctx, callerOfContext(ctx), m)
}

// grpcSnowflakes serves SnowflakeService on the grpc-go listener.
type grpcSnowflakes struct {
	idmintv1.UnsafeSnowflakeServiceServer
	h snowflakes
}

var _ idmintv1.SnowflakeServiceServer = grpcSnowflakes{}

func (g grpcSnowflakes) NextSnowflake(ctx context.Context, m *idmintv1.NextSnowflakeRequest) (*idmintv1.NextSnowflakeResponse, error) {
	return g.h.nextSnowflake(ctx, callerOfContext(ctx), m)
}

func (g grpcSnowflakes) NextSnowflakes(ctx context.Context, m *idmintv1.NextSnowflakesRequest) (*idmintv1.NextSnowflakesResponse, error) {
	return g.h.nextSnowflakes(ctx, callerOfContext(ctx), m)
}

func (g grpcSnowflakes) ParseSnowflake(ctx context.Context, m *idmintv1.ParseSnowflakeRequest) (*idmintv1.ParseSnowflakeResponse, error) {
	return g.h.parseSnowflake(ctx, callerOfContext(ctx), m)
}

// grpcAdmin serves AdminService on the grpc-go listener.
type grpcAdmin struct {
	idmintv1.UnsafeAdminServiceServer
	h admin
}

var _ idmintv1.AdminServiceServer = grpcAdmin{}

func (g grpcAdmin) ListTags(ctx context.Context, m *idmintv1.ListTagsRequest) (*idmintv1.ListTagsResponse, error) {
	return g.h.listTags(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) CreateTag(ctx context.Context, m *idmintv1.CreateTagRequest) (*idmintv1.CreateTagResponse, error) {
	return g.h.createTag(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) GetTag(ctx context.Context, m *idmintv1.GetTagRequest) (*idmintv1.GetTagResponse, error) {
	return g.h.getTag(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) UpdateTag(ctx context.Context, m *idmintv1.UpdateTagRequest) (*idmintv1.UpdateTagResponse, error) {
	return g.h.updateTag(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) BumpTag(ctx context.Context, m *idmintv1.BumpTagRequest) (*idmintv1.BumpTagResponse, error) {
	return g.h.bumpTag(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) ListTokens(ctx context.Context, m *idmintv1.ListTokensRequest) (*idmintv1.ListTokensResponse, error) {
	return g.h.listTokens(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) CreateToken(ctx context.Context, m *idmintv1.CreateTokenRequest) (*idmintv1.CreateTokenResponse, error) {
	return g.h.createToken(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) RevokeToken(ctx context.Context, m *idmintv1.RevokeTokenRequest) (*idmintv1.RevokeTokenResponse, error) {
	return g.h.revokeToken(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) ListStandbys(ctx context.Context, m *idmintv1.ListStandbysRequest) (*idmintv1.ListStandbysResponse, error) {
	return g.h.listStandbys(ctx, callerOfContext(ctx), m)
}

func (g grpcAdmin) ForgetStandby(ctx context.Context, m *idmintv1.ForgetStandbyRequest) (*idmintv1.ForgetStandbyResponse, error) {
	return g.h.forgetStandby(ctx, callerOfContext(ctx), m)
}

// grpcHealth serves grpc.health.v1.Health's Check from /id/health, as the
// HTTP port's health service does (health), run as the call's caller. Watch
// is not served (Unimplemented), as on the HTTP port.
type grpcHealth struct {
	healthpb.UnimplementedHealthServer
	h *health
}

var _ healthpb.HealthServer = grpcHealth{}

// Check implements healthpb.HealthServer.
func (g grpcHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if s := req.GetService(); s != "" && !g.h.services[s] {
		return nil, status.Error(codes.NotFound, errUnknownService.Error())
	}
	res, err := g.h.check(ctx, callerOfContext(ctx), req.GetService())
	if err != nil {
		return nil, err
	}
	switch res.Status {
	case grpchealth.StatusServing:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case grpchealth.StatusNotServing:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return nil, status.Error(codes.Internal, errInternal.Error())
}
