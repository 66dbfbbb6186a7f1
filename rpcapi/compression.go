package rpcapi

import (
	"compress/gzip"
	"errors"
	"io"

	"connectrpc.com/connect"
)

// A call's message may come gzipped (gRPC's grpc-encoding, Connect's
// Content-Encoding). connect-go inflates it through WithReadMaxBytes, but a
// message over the limit it then inflates to its end, to say how large it
// was: a 61 KB body of zeros inflates to 63 MB, 18 ms of CPU, before the
// call is refused. So the decompressor registered for gzip stops by itself
// one byte past the limit, and a compressed call costs no more than a plain
// one of maxMessageBytes.

// compressMinBytes is the smallest reply sent compressed, when the caller
// accepts gzip: below it, compressing costs more than it saves.
const compressMinBytes = 1 << 10

// errInflatedTooLarge is a gzipped message that inflates past
// maxMessageBytes; connect-go answers it ResourceExhausted.
var errInflatedTooLarge = errors.New("rpcapi: the message inflates past the limit")

// boundedGzip is gzip's decompressor that yields at most limit+1 bytes
// between resets, the one past the limit telling connect-go the message is
// too large, and errInflatedTooLarge after them: nothing past the limit is
// ever inflated. connect-go pools it and resets it for each message.
type boundedGzip struct {
	gz    gzip.Reader
	limit int64
	left  int64 // bytes it may still yield
}

var _ connect.Decompressor = (*boundedGzip)(nil)

func newBoundedGzip() connect.Decompressor { return &boundedGzip{limit: maxMessageBytes} }

// Read implements io.Reader.
func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		return 0, errInflatedTooLarge
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.gz.Read(p)
	d.left -= int64(n)
	return n, err
}

// Reset implements connect.Decompressor: a new message, a new allowance.
func (d *boundedGzip) Reset(r io.Reader) error {
	d.left = d.limit + 1
	return d.gz.Reset(r)
}

// Close implements connect.Decompressor.
func (d *boundedGzip) Close() error { return d.gz.Close() }

func newGzipCompressor() connect.Compressor { return gzip.NewWriter(io.Discard) }
