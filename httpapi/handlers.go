package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// The ID routes are the hot path: they read their parameters without
// building a query map, leave the tag's validation to the allocator (which
// validates a tag only when it has no buffer for it yet), and append-encode
// the reply into a pooled buffer.

// callerOf is who makes r: its Authorization values and peer address. It
// allocates nothing.
func callerOf(r *http.Request) core.Caller {
	return core.Caller{Authorization: r.Header["Authorization"], Addr: r.RemoteAddr}
}

func (s *Server) handleID(w http.ResponseWriter, r *http.Request) {
	tag, bad := tagParam(r.URL.RawQuery)
	id, err := s.core.NextID(r.Context(), callerOf(r), core.IDsRequest{Tag: tag, Bad: bad})
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	buf := replies.Get().(*reply)
	defer buf.release()
	if wantsText(r) {
		buf.b = append(strconv.AppendInt(buf.b[:0], id, 10), '\n')
		writeBody(w, http.StatusOK, contentText, buf.b)
		return
	}
	b := append(buf.b[:0], `{"biz_tag":`...)
	b = appendJSONString(b, tag)
	b = append(b, `,"id":"`...)
	b = strconv.AppendInt(b, id, 10)
	buf.b = append(b, "\"}\n"...)
	writeBody(w, http.StatusOK, contentJSON, buf.b)
}

// idsRequest reads the query of /ids: the tag, the count, the format. The
// first fault found is the request's Bad, answered by the core once
// access control passed.
func (s *Server) idsRequest(raw string) core.IDsRequest {
	tag, bad := tagParam(raw)
	count, err := countParam(raw, s.core.MaxCount())
	if bad == nil {
		bad = err
	}
	ranges, err := formatParam(raw)
	if bad == nil {
		bad = err
	}
	return core.IDsRequest{Tag: tag, Count: count, Ranges: ranges, Bad: bad}
}

func (s *Server) handleIDs(w http.ResponseWriter, r *http.Request) {
	req := s.idsRequest(r.URL.RawQuery)
	buf := replies.Get().(*reply)
	defer buf.release()
	// IDs taken before an error are handed out (fewer than count) rather
	// than lost.
	var err error
	if buf.ranges, err = s.core.NextIDs(r.Context(), callerOf(r), req, buf.ranges[:0]); err != nil && len(buf.ranges) == 0 {
		s.WriteError(w, r, err)
		return
	}
	b := append(buf.b[:0], `{"biz_tag":`...)
	b = appendJSONString(b, req.Tag)
	if req.Ranges {
		b = append(b, `,"ranges":[`...)
		for i, rg := range buf.ranges {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `["`...)
			b = strconv.AppendInt(b, rg.First, 10)
			b = append(b, `","`...)
			b = strconv.AppendInt(b, rg.Last, 10)
			b = append(b, `"]`...)
		}
	} else {
		b = append(b, `,"ids":[`...)
		sep := false
		for _, rg := range buf.ranges {
			// The loop ends on Last, not past it: past 2^63-1, id++
			// wraps and id <= Last would hold forever.
			for id := rg.First; ; id++ {
				if sep {
					b = append(b, ',')
				}
				sep = true
				b = append(b, '"')
				b = strconv.AppendInt(b, id, 10)
				b = append(b, '"')
				if id == rg.Last {
					break
				}
			}
		}
	}
	buf.b = append(b, "]}\n"...)
	writeBody(w, http.StatusOK, contentJSON, buf.b)
}

// reply is a pooled buffer for one reply and the ranges behind it.
type reply struct {
	b      []byte
	ranges []segment.Range
}

var replies = sync.Pool{New: func() any { return &reply{b: make([]byte, 0, 128)} }}

// maxPooledReply bounds the buffers kept for reuse: a rare huge reply
// (a large --max-count) is left to the garbage collector.
const maxPooledReply = 64 << 10

func (r *reply) release() {
	if cap(r.b) <= maxPooledReply && cap(r.ranges) <= 64 {
		replies.Put(r)
	}
}

// Header values shared by every reply. net/http never modifies them, and
// Set or Add on a header replaces the slice rather than writing into it.
var (
	contentJSON = []string{"application/json"}
	contentText = []string{"text/plain; charset=utf-8"}
	noStore     = []string{"no-store"}
)

// writeBody writes an encoded reply.
func writeBody(w http.ResponseWriter, status int, contentType []string, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentType
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	w.Write(body)
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// does. A tag needs no escape; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// tagParam returns the one biz_tag of a raw query. Its format is checked by
// the allocator, only when the tag has no buffer yet.
func tagParam(raw string) (string, error) {
	tag, n := queryParam(raw, "biz_tag")
	switch {
	case tag == "":
		return "", core.ErrTagRequired
	case n > 1:
		return "", core.ErrTagTwice
	}
	return tag, nil
}

// countParam returns the count of a raw query: a decimal from 1 to limit.
// Out of bounds, it returns the count it read with the error (the limits
// charge what was asked).
func countParam(raw string, limit int) (int, error) {
	v, n := queryParam(raw, "count")
	if n != 1 {
		return 0, newError(wire.CodeInvalidCount, fmt.Sprintf("count is required once, 1 to %d", limit))
	}
	c, err := strconv.Atoi(v)
	if err != nil {
		return 0, newError(wire.CodeInvalidCount, fmt.Sprintf("count must be a whole number from 1 to %d", limit))
	}
	if c < 1 || c > limit {
		return c, newError(wire.CodeInvalidCount, fmt.Sprintf("count must be a whole number from 1 to %d", limit))
	}
	return c, nil
}

// formatParam reports whether a raw query asks for ranges (format=ranges)
// rather than the list of IDs (no format, or format=list).
func formatParam(raw string) (ranges bool, err error) {
	v, n := queryParam(raw, "format")
	switch {
	case n == 0 || n == 1 && v == "list":
		return false, nil
	case n == 1 && v == "ranges":
		return true, nil
	}
	return false, core.ErrFormat
}

func wantsText(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "text/plain") && !strings.Contains(accept, "application/json")
}

func stack() []byte { return debug.Stack() }
