package rpcapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/token"
)

// bombInflated is what the gzip bomb inflates to: 63 MiB of zeros, in
// 64 KB gzipped, under the message limit as it travels.
const bombInflated = 63 << 20

// gzipBomb is bombInflated zeros, gzipped, made once. Every MiB of zeros
// after the first deflates to the same bytes (a block ended by a flush), so
// the bomb repeats them rather than compress 63 MiB.
var gzipBomb = sync.OnceValue(func() []byte {
	zeros := make([]byte, 1<<20)
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	block := func() []byte {
		w.Write(zeros)
		w.Flush()
		b := bytes.Clone(buf.Bytes())
		buf.Reset()
		return b
	}
	first, next := block(), block()
	w.Close()
	out := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff} // gzip, deflate, no name or time
	out = append(out, first...)
	crc := crc32.ChecksumIEEE(zeros)
	for range bombInflated>>20 - 1 {
		out = append(out, next...)
		crc = crc32.Update(crc, crc32.IEEETable, zeros)
	}
	out = append(out, buf.Bytes()...) // the final block
	out = binary.LittleEndian.AppendUint32(out, crc)
	return binary.LittleEndian.AppendUint32(out, bombInflated)
})

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// countingDecompressor counts the bytes a decompressor yields.
type countingDecompressor struct {
	connect.Decompressor
	n *atomic.Int64
}

func (c countingDecompressor) Read(p []byte) (int, error) {
	n, err := c.Decompressor.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// rpcServer is idmint's HTTP server in the token mode with the service
// mounted as serve mounts it (HTTP/1.1 and h2c on one port), whose gzip
// decompressors count what they inflate.
type rpcServer struct {
	url      string
	ids      string // a token of the ids scope
	inflated *atomic.Int64
	h2c      *http.Client
}

func newRPCServer(tb testing.TB) *rpcServer {
	tb.Helper()
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 1000}); err != nil {
		tb.Fatal(err)
	}
	tk, secret, err := token.New("app", []string{"ids"})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := m.CreateToken(ctx, tk); err != nil {
		tb.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := allocator.New(allocator.Config{Store: m, Logger: quiet, Instance: "test"})
	tb.Cleanup(func() { a.Close(context.Background()) })
	s := &rpcServer{ids: secret, inflated: new(atomic.Int64)}
	svc := New()
	bounded := svc.newDecompressor
	svc.newDecompressor = func() connect.Decompressor { return countingDecompressor{bounded(), s.inflated} }
	api := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: quiet, Admin: m, TokenAdmin: m,
		Auth: httpapi.AuthConfig{Tokens: m, IDs: httpapi.AuthToken}, RPC: svc})
	hs := api.HTTPServer()
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = hs
	ts.Start()
	tb.Cleanup(ts.Close)
	s.url = ts.URL
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s.h2c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p}}
	tb.Cleanup(s.h2c.CloseIdleConnections)
	return s
}

// rpcCall is one unary call written by hand, so that its body can be
// anything.
type rpcCall struct {
	protocol  string // "connect" or "grpc"
	procedure string
	body      []byte // the message as sent: gzipped when gzip is set
	gzip      bool
	token     string // "" sends none
	hideSize  bool   // send no Content-Length
}

// reply is a call's outcome: its code (0 for OK) and whether the reply
// came compressed.
type callReply struct {
	code       connect.Code
	compressed bool
}

func (s *rpcServer) do(tb testing.TB, c rpcCall) callReply {
	tb.Helper()
	body := c.body
	if c.protocol == "grpc" {
		env := make([]byte, 5, 5+len(body))
		if c.gzip {
			env[0] = 1
		}
		binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
		body = append(env, body...)
	}
	var rd io.Reader = bytes.NewReader(body)
	if c.hideSize {
		rd = io.MultiReader(rd)
	}
	req, err := http.NewRequest(http.MethodPost, s.url+c.procedure, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	switch c.protocol {
	case "connect":
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Accept-Encoding", "gzip")
		if c.gzip {
			req.Header.Set("Content-Encoding", "gzip")
		}
	case "grpc":
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Grpc-Accept-Encoding", "gzip")
		if c.gzip {
			req.Header.Set("Grpc-Encoding", "gzip")
		}
	}
	resp, err := s.h2c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if c.protocol == "connect" {
		r := callReply{compressed: resp.Header.Get("Content-Encoding") == "gzip"}
		if resp.StatusCode != http.StatusOK {
			var e struct {
				Code connect.Code `json:"code"`
			}
			if err := json.Unmarshal(out, &e); err != nil {
				tb.Fatalf("%s answered %s: %q", c.procedure, resp.Status, out)
			}
			r.code = e.Code
		}
		return r
	}
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" {
		status = resp.Header.Get("Grpc-Status") // a trailers-only reply
	}
	n, err := strconv.Atoi(status)
	if err != nil {
		tb.Fatalf("%s answered %s without grpc-status: %q", c.procedure, resp.Status, out)
	}
	// A gRPC reply's header names the encoding it may use; each message's
	// flag says whether it did.
	return callReply{code: connect.Code(n), compressed: len(out) > 0 && out[0]&1 == 1}
}

// TestService_GzipBomb: a gzipped message that inflates far past the
// message limit (63 MiB of zeros in 61 KB) sent to a procedure of a real
// server, over Connect and gRPC, is refused ResourceExhausted having been
// inflated no further than the limit and a byte, and without a token not
// inflated at all (Unauthenticated, from the headers); a gzipped message
// under the limit is served, and its small reply is not compressed.
func TestService_GzipBomb(t *testing.T) {
	s := newRPCServer(t)
	bomb := gzipBomb()
	if len(bomb) >= maxMessageBytes {
		t.Fatalf("the bomb is %d bytes gzipped, not under the limit %d", len(bomb), maxMessageBytes)
	}
	ok, err := proto.Marshal(&idmintv1.NextIDRequest{BizTag: "order"})
	if err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []string{"connect", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			call := rpcCall{protocol: protocol, procedure: idmintv1connect.IDServiceNextIDProcedure, body: bomb, gzip: true, token: s.ids}
			s.inflated.Store(0)
			if got := s.do(t, call); got.code != connect.CodeResourceExhausted {
				t.Errorf("the bomb: %v, want resource_exhausted", got.code)
			}
			if n := s.inflated.Load(); n > maxMessageBytes+1 {
				t.Errorf("the bomb inflated to %d bytes, want at most the limit and a byte (%d)", n, maxMessageBytes+1)
			}

			call.token = ""
			s.inflated.Store(0)
			if got := s.do(t, call); got.code != connect.CodeUnauthenticated {
				t.Errorf("the bomb without a token: %v, want unauthenticated", got.code)
			}
			if n := s.inflated.Load(); n != 0 {
				t.Errorf("the bomb without a token inflated %d bytes, want none", n)
			}

			call.body, call.token = gzipped(ok), s.ids
			if got := s.do(t, call); got.code != 0 || got.compressed {
				t.Errorf("a gzipped NextID: %v, compressed reply %v; want OK, uncompressed", got.code, got.compressed)
			}
		})
	}
}
