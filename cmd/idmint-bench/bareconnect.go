package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// bareConnectIDs is the reference connect-go service: NextID from an
// atomic counter, nothing else (the other procedures: Unimplemented).
type bareConnectIDs struct {
	idmintv1connect.UnimplementedIDServiceHandler
	n atomic.Int64
}

func (b *bareConnectIDs) NextID(_ context.Context, req *connect.Request[idmintv1.NextIDRequest]) (*connect.Response[idmintv1.NextIDResponse], error) {
	if req.Msg.GetBizTag() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("biz_tag is required"))
	}
	return connect.NewResponse(&idmintv1.NextIDResponse{BizTag: req.Msg.GetBizTag(), Id: b.n.Add(1)}), nil
}

// runBareConnect serves bareConnectIDs with connect-go on net/http, HTTP/1.1
// and h2c, as idmint's HTTP port serves connect-go, until ctx ends:
// "serve-bare-connect".
func runBareConnect(ctx context.Context, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(idmintv1connect.NewIDServiceHandler(&bareConnectIDs{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
