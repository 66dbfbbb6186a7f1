package httpapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// TagAdmin is what the admin API needs to manage tags: an allocator.Admin
// (every allocator.Store is one).
type TagAdmin = allocator.Admin

// TagJSON is a tag as the admin API shows it. max_id is a string, as IDs
// are everywhere in the API; max_step is the one in force: a tag created
// without one shows the default (1,000,000), as `tag list` does.
type TagJSON struct {
	Tag         string `json:"biz_tag"`
	MaxID       int64  `json:"max_id,string"`
	Step        int64  `json:"step"`
	MaxStep     int64  `json:"max_step"`
	Description string `json:"description"`
	// RunwaySeconds is the tag's runway; 0 leaves the instance's --runway.
	RunwaySeconds float64 `json:"runway_seconds"`
}

func tagJSON(t allocator.Tag) TagJSON {
	maxStep := t.MaxStep
	if maxStep == 0 {
		maxStep = segment.DefaultMaxStep
	}
	return TagJSON{Tag: t.Name, MaxID: t.MaxID, Step: t.Step, MaxStep: maxStep, Description: t.Description,
		RunwaySeconds: t.Runway.Seconds()}
}

// RunwayOf converts a runway in seconds, as the admin API takes it, to a
// duration in whole milliseconds. A value past allocator.MaxRunway comes
// back just past it, for the store to refuse with its bounds, instead of
// overflowing.
func RunwayOf(seconds float64) time.Duration {
	if seconds > allocator.MaxRunway.Seconds() {
		return allocator.MaxRunway + time.Millisecond
	}
	if seconds < 0 {
		return -time.Millisecond
	}
	return time.Duration(math.Round(seconds*1000)) * time.Millisecond
}

// createTagRequest is the body of POST /v1/tags. A step or max_step left
// out takes the default; one given must be at least 1, so that a 0 sent by
// mistake is refused rather than read as "the default".
type createTagRequest struct {
	Tag           string  `json:"biz_tag"`
	Step          *int64  `json:"step"`
	MaxStep       *int64  `json:"max_step"`
	Start         int64   `json:"start"`
	Description   string  `json:"description"`
	RunwaySeconds float64 `json:"runway_seconds"`
}

// patchTagRequest is the body of PATCH /v1/tags/{biz_tag}: the fields given
// change, the others stay.
type patchTagRequest struct {
	Step          *int64   `json:"step"`
	MaxStep       *int64   `json:"max_step"`
	Description   *string  `json:"description"`
	RunwaySeconds *float64 `json:"runway_seconds"`
}

// bumpRequest is the body of POST /v1/tags/{biz_tag}/bump: exactly one of
// to and by.
type bumpRequest struct {
	To int64 `json:"to"`
	By int64 `json:"by"`
}

// mountAdmin adds the admin API: every route needs a token with the admin
// scope. Routes are registered one by one (no /v1 sub-router), so that
// other /v1 routes can be added beside them.
func (s *Server) mountAdmin(r chi.Router) {
	if s.cfg.Admin == nil {
		return
	}
	admin := r.With(s.requireScope("admin", func(p *principal) bool { return p.admin }))
	admin.Get("/v1/tags", s.handleListTags)
	admin.Post("/v1/tags", s.handleCreateTag)
	admin.Get("/v1/tags/{biz_tag}", s.handleShowTag)
	admin.Patch("/v1/tags/{biz_tag}", s.handlePatchTag)
	admin.Post("/v1/tags/{biz_tag}/bump", s.handleBumpTag)
}

func (s *Server) handleListTags(w http.ResponseWriter, r *http.Request) {
	tags, err := s.cfg.Admin.Tags(r.Context())
	if err != nil {
		s.adminError(w, r, err)
		return
	}
	out := struct {
		Tags []TagJSON `json:"tags"`
	}{Tags: make([]TagJSON, 0, len(tags))}
	for _, t := range tags {
		out.Tags = append(out.Tags, tagJSON(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleCreateTag(w http.ResponseWriter, r *http.Request) {
	var req createTagRequest
	if !s.decode(w, r, &req) {
		return
	}
	spec := allocator.TagSpec{Name: req.Tag, Start: req.Start, Description: req.Description, Runway: RunwayOf(req.RunwaySeconds)}
	for _, f := range []struct {
		name string
		in   *int64
		out  *int64
	}{{"step", req.Step, &spec.Step}, {"max_step", req.MaxStep, &spec.MaxStep}} {
		if f.in == nil {
			continue
		}
		if *f.in < 1 {
			s.adminError(w, r, fmt.Errorf("%w: %s %d: want at least 1 (leave it out for the default)", allocator.ErrInvalidSpec, f.name, *f.in))
			return
		}
		*f.out = *f.in
	}
	t, err := s.cfg.Admin.CreateTag(r.Context(), spec)
	if err != nil {
		s.adminError(w, r, err)
		return
	}
	s.cfg.Logger.Info("tag created over the admin API", "biz_tag", t.Name, "step", t.Step, "token", tokenName(r))
	writeJSON(w, http.StatusCreated, tagJSON(t))
}

func (s *Server) handleShowTag(w http.ResponseWriter, r *http.Request) {
	t, err := s.findTag(r)
	if err != nil {
		s.adminError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tagJSON(t))
}

func (s *Server) handlePatchTag(w http.ResponseWriter, r *http.Request) {
	var req patchTagRequest
	if !s.decode(w, r, &req) {
		return
	}
	t, err := s.findTag(r)
	if err == nil && (req.Step != nil || req.MaxStep != nil) {
		step, maxStep := t.Step, t.MaxStep
		if req.Step != nil {
			step = *req.Step
		}
		if req.MaxStep != nil {
			maxStep = *req.MaxStep
		}
		t, err = s.cfg.Admin.SetStep(r.Context(), t.Name, step, maxStep)
	}
	if err == nil && req.Description != nil {
		t, err = s.cfg.Admin.Describe(r.Context(), t.Name, *req.Description)
	}
	if err == nil && req.RunwaySeconds != nil {
		t, err = s.cfg.Admin.SetRunway(r.Context(), t.Name, RunwayOf(*req.RunwaySeconds))
	}
	if err != nil {
		s.adminError(w, r, err)
		return
	}
	s.cfg.Logger.Info("tag changed over the admin API", "biz_tag", t.Name, "step", t.Step, "max_step", t.MaxStep, "runway", t.Runway, "token", tokenName(r))
	writeJSON(w, http.StatusOK, tagJSON(t))
}

func (s *Server) handleBumpTag(w http.ResponseWriter, r *http.Request) {
	var req bumpRequest
	if !s.decode(w, r, &req) {
		return
	}
	t, err := s.findTag(r)
	if err == nil {
		t, err = s.cfg.Admin.Bump(r.Context(), t.Name, req.To, req.By)
	}
	if err != nil {
		s.adminError(w, r, err)
		return
	}
	s.cfg.Logger.Warn("tag bumped over the admin API", "biz_tag", t.Name, "max_id", t.MaxID, "token", tokenName(r))
	writeJSON(w, http.StatusOK, tagJSON(t))
}

// findTag returns the tag named in the path.
func (s *Server) findTag(r *http.Request) (allocator.Tag, error) {
	name := chi.URLParam(r, "biz_tag")
	if err := allocator.ValidateTag(name); err != nil {
		return allocator.Tag{}, err
	}
	tags, err := s.cfg.Admin.Tags(r.Context())
	if err != nil {
		return allocator.Tag{}, err
	}
	for _, t := range tags {
		if t.Name == name {
			return t, nil
		}
	}
	return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, name)
}

// decode reads a JSON body of at most MaxBodyBytes into v, refusing
// unknown fields and trailing data; on failure it answers and returns false.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	switch err := decodeBody(w, r, s.cfg.Limits.MaxBodyBytes, v); {
	case err == nil:
		return true
	case errors.Is(err, errBodyTooLarge):
		s.WriteError(w, r, requestError(wire.CodeBodyTooLarge, "request body too large"))
	default:
		s.WriteError(w, r, requestError(wire.CodeInvalidJSON, err.Error()))
	}
	return false
}

// adminError answers an error of tag administration (errorTable maps
// them); a bump that raised nothing says so.
func (s *Server) adminError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, allocator.ErrNotRaised) {
		err = fmt.Errorf("%w: nothing changed", err)
	}
	s.WriteError(w, r, err)
}

// tokenName names the token of an admin request, for the log.
func tokenName(r *http.Request) string {
	if p, ok := r.Context().Value(principalKey{}).(*principal); ok {
		return p.token.Name + " (" + p.token.ID + ")"
	}
	return ""
}
