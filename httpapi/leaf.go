package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// Leaf's HTTP routes, for callers written for Meituan Leaf
// (docs/from-leaf.md): GET /api/segment/get/{key} is GET /id of tag key,
// GET /api/snowflake/get/{key} is GET /snowflake (Leaf's Snowflake mode
// ignores its key too). The same core operations, so the same tokens,
// scopes and limits; the replies are Leaf's: the bare number as
// text/plain, and a failure Leaf knows (an unknown key, no ID to be had)
// is a 500 whose body is Leaf's Result, with the idmint code in
// X-Idmint-Error. Refusals Leaf has no word for (a token missing or
// without the tag's scope, a rate limit, a bad name) keep idmint's status.
const (
	leafSegmentPath   = "/api/segment/get/{key}"
	leafSnowflakePath = "/api/snowflake/get/{key}"
)

// Leaf's Result ids of a failure (SegmentIDGenImpl): the cache not
// initialised, the key unknown, both segments empty.
const (
	leafCacheNotReady = -1
	leafKeyNotExists  = -2
	leafSegmentsEmpty = -3
)

// leafErrorHeader carries the idmint code of a failure answered in Leaf's
// words.
const leafErrorHeader = "X-Idmint-Error"

func (s *Server) handleLeafSegment(w http.ResponseWriter, r *http.Request) {
	id, err := s.core.NextID(r.Context(), callerOf(r), core.IDsRequest{Tag: chi.URLParam(r, "key")})
	if err != nil {
		s.writeLeafError(w, r, err)
		return
	}
	writeLeafID(w, id)
}

func (s *Server) handleLeafSnowflake(w http.ResponseWriter, r *http.Request) {
	id, err := s.core.NextSnowflake(r.Context(), callerOf(r))
	if err != nil {
		s.writeLeafError(w, r, err)
		return
	}
	writeLeafID(w, id)
}

// writeLeafID answers as Leaf does: the number alone, no newline.
func writeLeafID(w http.ResponseWriter, id int64) {
	var b [20]byte
	writeBody(w, http.StatusOK, contentText, strconv.AppendInt(b[:0], id, 10))
}

// writeLeafError answers err in Leaf's words where Leaf has some.
func (s *Server) writeLeafError(w http.ResponseWriter, r *http.Request, err error) {
	rule, status := s.noteError(w, r, err)
	w.Header().Set(leafErrorHeader, rule.Code)
	leafID := 0
	switch {
	case errors.Is(err, wire.ErrUnknownTag):
		leafID = leafKeyNotExists
	case status == http.StatusServiceUnavailable:
		leafID = leafSegmentsEmpty
	case status >= 500:
		leafID = leafCacheNotReady
	}
	if leafID != 0 {
		writeBody(w, http.StatusInternalServerError, contentText,
			[]byte("Result{id="+strconv.Itoa(leafID)+", status=EXCEPTION}"))
		return
	}
	writeBody(w, status, contentText, []byte(rule.Code+": "+rule.Public(err)))
}
