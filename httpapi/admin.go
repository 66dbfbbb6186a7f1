package httpapi

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// The admin routes (core: the tag, token and standby operations): each
// needs a token with the admin scope. The caller is prechecked from its
// headers before a body is read.

func (s *Server) handleListTags(w http.ResponseWriter, r *http.Request) {
	out, err := s.core.ListTags(r.Context(), callerOf(r))
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleCreateTag(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateTagRequest
	bad, ok := s.decodeAdmin(w, r, &req)
	if !ok {
		return
	}
	out, err := s.core.CreateTag(r.Context(), callerOf(r), req, bad)
	s.reply(w, r, http.StatusCreated, out, err)
}

func (s *Server) handleGetTag(w http.ResponseWriter, r *http.Request) {
	out, err := s.core.GetTag(r.Context(), callerOf(r), chi.URLParam(r, "biz_tag"))
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleUpdateTag(w http.ResponseWriter, r *http.Request) {
	var req wire.PatchTagRequest
	bad, ok := s.decodeAdmin(w, r, &req)
	if !ok {
		return
	}
	out, err := s.core.UpdateTag(r.Context(), callerOf(r), chi.URLParam(r, "biz_tag"), req, bad)
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleBumpTag(w http.ResponseWriter, r *http.Request) {
	var req wire.BumpRequest
	bad, ok := s.decodeAdmin(w, r, &req)
	if !ok {
		return
	}
	out, err := s.core.BumpTag(r.Context(), callerOf(r), chi.URLParam(r, "biz_tag"), req, bad)
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleListTokens(w http.ResponseWriter, r *http.Request) {
	out, err := s.core.ListTokens(r.Context(), callerOf(r))
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateTokenRequest
	bad, ok := s.decodeAdmin(w, r, &req)
	if !ok {
		return
	}
	out, err := s.core.CreateToken(r.Context(), callerOf(r), req, bad)
	s.reply(w, r, http.StatusCreated, out, err)
}

func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	out, err := s.core.RevokeToken(r.Context(), callerOf(r), chi.URLParam(r, "id"))
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleListStandbys(w http.ResponseWriter, r *http.Request) {
	out, err := s.core.ListStandbys(r.Context(), callerOf(r))
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) handleForgetStandby(w http.ResponseWriter, r *http.Request) {
	if err := s.core.ForgetStandby(r.Context(), callerOf(r), chi.URLParam(r, "name")); err != nil {
		s.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// reply writes out with status, or err.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, status int, out any, err error) {
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, status, out)
}

// decodeAdmin prechecks the caller of an admin route (refused: answered,
// ok false), then reads a JSON body of at most MaxBodyBytes into v,
// refusing unknown fields and trailing data: bad is what is wrong with it,
// for the core to answer once the caller is admitted.
func (s *Server) decodeAdmin(w http.ResponseWriter, r *http.Request, v any) (bad error, ok bool) {
	if err := s.core.Precheck(r.Context(), callerOf(r), core.AccessAdmin); err != nil {
		s.WriteError(w, r, err)
		return nil, false
	}
	switch err := decodeBody(w, r, s.cfg.Limits.MaxBodyBytes, v); {
	case err == nil:
		return nil, true
	case errors.Is(err, errBodyTooLarge):
		return newError(wire.CodeBodyTooLarge, "request body too large"), true
	default:
		return newError(wire.CodeInvalidJSON, err.Error()), true
	}
}
