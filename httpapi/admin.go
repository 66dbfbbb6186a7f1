package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/allocator"
)

// TagAdmin is what the admin API needs to manage tags: an allocator.Admin
// (every allocator.Store is one).
type TagAdmin = allocator.Admin

// TagJSON is a tag as the admin API shows it. max_id is a string, as IDs
// are everywhere in the API; max_step 0 means the default (1,000,000).
type TagJSON struct {
	Tag         string `json:"biz_tag"`
	MaxID       int64  `json:"max_id,string"`
	Step        int64  `json:"step"`
	MaxStep     int64  `json:"max_step"`
	Description string `json:"description"`
}

func tagJSON(t allocator.Tag) TagJSON {
	return TagJSON{Tag: t.Name, MaxID: t.MaxID, Step: t.Step, MaxStep: t.MaxStep, Description: t.Description}
}

// createTagRequest is the body of POST /v1/tags.
type createTagRequest struct {
	Tag         string `json:"biz_tag"`
	Step        int64  `json:"step"`
	MaxStep     int64  `json:"max_step"`
	Start       int64  `json:"start"`
	Description string `json:"description"`
}

// patchTagRequest is the body of PATCH /v1/tags/{biz_tag}: the fields given
// change, the others stay.
type patchTagRequest struct {
	Step        *int64  `json:"step"`
	MaxStep     *int64  `json:"max_step"`
	Description *string `json:"description"`
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
	t, err := s.cfg.Admin.CreateTag(r.Context(), allocator.TagSpec{
		Name: req.Tag, Step: req.Step, MaxStep: req.MaxStep, Start: req.Start, Description: req.Description,
	})
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
	if err != nil {
		s.adminError(w, r, err)
		return
	}
	s.cfg.Logger.Info("tag changed over the admin API", "biz_tag", t.Name, "step", t.Step, "max_step", t.MaxStep, "token", tokenName(r))
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
		s.WriteError(w, r, requestError(CodeBodyTooLarge, "request body too large"))
	default:
		s.WriteError(w, r, requestError(CodeInvalidJSON, err.Error()))
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
