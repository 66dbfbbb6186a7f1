package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// A target of the Go load generators (closed loop: grpcLoad.run; open
// loop: openLoop.run) is a way to open connections that each make one call
// at a time, back to back or on schedule.

// dialer opens one connection to a target: its call, and how to close it.
type dialer func(ctx context.Context) (call func(context.Context) error, closeConn func(), err error)

// grpcDialer calls NextID on addr with grpc-go over h2c, one ClientConn.
func grpcDialer(addr, tag string) dialer {
	return func(ctx context.Context) (func(context.Context) error, func(), error) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) error { return callNextID(ctx, cc, tag) }, func() { cc.Close() }, nil
	}
}

// connectDialer calls NextID on base with connect-go's client over h2c
// (binary Connect protocol), one HTTP/2 connection.
func connectDialer(base, tag string) dialer {
	return func(ctx context.Context) (func(context.Context) error, func(), error) {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		t := &http.Transport{Protocols: &p, MaxConnsPerHost: 1}
		c := idmintv1connect.NewIDServiceClient(&http.Client{Transport: t}, base)
		call := func(ctx context.Context) error {
			_, err := c.NextID(ctx, connect.NewRequest(&idmintv1.NextIDRequest{BizTag: tag}))
			return err
		}
		return call, t.CloseIdleConnections, nil
	}
}

// httpDialer GETs url with net/http's client over HTTP/1.1 keep-alive
// connections (at most perConn at once per dialer: one dial per worker).
func httpDialer(url string) dialer {
	return func(ctx context.Context) (func(context.Context) error, func(), error) {
		t := &http.Transport{MaxIdleConnsPerHost: 1024, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
		c := &http.Client{Transport: t}
		call := func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			var buf [512]byte
			for {
				if _, err := resp.Body.Read(buf[:]); err != nil {
					break
				}
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			return nil
		}
		return call, t.CloseIdleConnections, nil
	}
}

// hostOf is a base URL's host:port.
func hostOf(base string) string { return strings.TrimPrefix(base, "http://") }
