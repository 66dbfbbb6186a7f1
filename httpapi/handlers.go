package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/idmint/idmint/allocator"
)

type idResponse struct {
	Tag string `json:"biz_tag"`
	ID  int64  `json:"id,string"`
}

type idsResponse struct {
	Tag string   `json:"biz_tag"`
	IDs []string `json:"ids"`
}

func (s *Server) handleID(w http.ResponseWriter, r *http.Request) {
	tag, err := parseTag(r.URL.Query())
	if err != nil {
		writeError(w, r, s.cfg.Logger, err)
		return
	}
	id, err := s.cfg.Allocator.Next(r.Context(), tag)
	if err != nil {
		writeError(w, r, s.cfg.Logger, err)
		return
	}
	if wantsText(r) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "%d\n", id)
		return
	}
	writeJSON(w, http.StatusOK, idResponse{Tag: tag, ID: id})
}

func (s *Server) handleIDs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tag, err := parseTag(q)
	if err != nil {
		writeError(w, r, s.cfg.Logger, err)
		return
	}
	n, err := parseCount(q, s.cfg.MaxCount)
	if err != nil {
		writeError(w, r, s.cfg.Logger, err)
		return
	}
	ids, err := s.cfg.Allocator.NextN(r.Context(), tag, n)
	// IDs taken before an error are handed out (fewer than count) rather
	// than lost.
	if err != nil && len(ids) == 0 {
		writeError(w, r, s.cfg.Logger, err)
		return
	}
	resp := idsResponse{Tag: tag, IDs: make([]string, len(ids))}
	for i, id := range ids {
		resp.IDs[i] = strconv.FormatInt(id, 10)
	}
	writeJSON(w, http.StatusOK, resp)
}

// parseTag returns the one biz_tag of a query, validated.
func parseTag(q url.Values) (string, error) {
	vals, ok := q["biz_tag"]
	switch {
	case !ok || len(vals) == 0 || vals[0] == "":
		return "", badRequest(CodeInvalidTag, "biz_tag is required, e.g. /id?biz_tag=order")
	case len(vals) > 1:
		return "", badRequest(CodeInvalidTag, "give biz_tag once")
	}
	if err := allocator.ValidateTag(vals[0]); err != nil {
		return "", badRequest(CodeInvalidTag, err.Error())
	}
	return vals[0], nil
}

// parseCount returns the count of a query: a decimal from 1 to limit.
func parseCount(q url.Values, limit int) (int, error) {
	vals := q["count"]
	if len(vals) != 1 {
		return 0, badRequest(CodeInvalidCount, fmt.Sprintf("count is required once, 1 to %d", limit))
	}
	n, err := strconv.Atoi(vals[0])
	if err != nil || n < 1 || n > limit {
		return 0, badRequest(CodeInvalidCount, fmt.Sprintf("count must be a whole number from 1 to %d", limit))
	}
	return n, nil
}

func wantsText(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "text/plain") && !strings.Contains(accept, "application/json")
}

func stack() []byte { return debug.Stack() }
