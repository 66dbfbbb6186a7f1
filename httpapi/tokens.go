package httpapi

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/token"
)

// TokenJSON is a token as the admin API shows it: never its secret, never
// its hash.
type TokenJSON struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// IDsPerSecond is the token's own bound; 0: the instance's
	// --ids-per-second-per-token.
	IDsPerSecond float64    `json:"ids_per_second"`
	CreatedAt    time.Time  `json:"created_at"`
	RevokedAt    *time.Time `json:"revoked_at,omitempty"`
}

// TokenFromJSON is the token a TokenJSON shows, without a hash.
func TokenFromJSON(j TokenJSON) token.Token {
	return token.Token{ID: j.ID, Name: j.Name, Scopes: j.Scopes, IDsPerSecond: j.IDsPerSecond, CreatedAt: j.CreatedAt, RevokedAt: j.RevokedAt}
}

func tokenJSON(t token.Token) TokenJSON {
	scopes := t.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return TokenJSON{ID: t.ID, Name: t.Name, Scopes: scopes, IDsPerSecond: t.IDsPerSecond, CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt}
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// IDsPerSecond is optional: 0 or absent for the instance's bound.
	IDsPerSecond float64 `json:"ids_per_second,omitempty"`
}

// CreatedToken is the reply of POST /v1/tokens: the one reply that holds
// the bearer token, which idmint keeps only as a hash.
type CreatedToken struct {
	Token TokenJSON `json:"token"`
	// Secret is the bearer token to send as "Authorization: Bearer …".
	Secret string `json:"secret"`
	Note   string `json:"note"`
}

// shownOnce is CreatedToken.Note.
const shownOnce = "the secret is shown this once: keep it now; idmint stores only its hash and can never show it again"

// mountTokens adds the token admin routes: every one needs a token with
// the admin scope, like the tag routes.
func (s *Server) mountTokens(r chi.Router) {
	if s.cfg.TokenAdmin == nil {
		return
	}
	admin := r.With(s.requireScope("admin", func(p *principal) bool { return p.admin }))
	admin.Get("/v1/tokens", s.handleListTokens)
	admin.Post("/v1/tokens", s.handleCreateToken)
	admin.Delete("/v1/tokens/{id}", s.handleRevokeToken)
}

func (s *Server) handleListTokens(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.TokenAdmin.ListTokens(r.Context())
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	out := struct {
		Tokens []TokenJSON `json:"tokens"`
	}{Tokens: make([]TokenJSON, 0, len(list))}
	for _, t := range list {
		out.Tokens = append(out.Tokens, tokenJSON(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req CreateTokenRequest
	if !s.decode(w, r, &req) {
		return
	}
	// The CLI's checks: name, scopes, rate; nothing is stored on failure.
	tok, secret, err := token.New(req.Name, req.Scopes)
	if err == nil {
		err = token.ValidateRate(req.IDsPerSecond)
	}
	if err == nil {
		tok.IDsPerSecond = req.IDsPerSecond
		tok, err = s.cfg.TokenAdmin.CreateToken(r.Context(), tok)
	}
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	// The next request reads the tokens again: the new one works at once
	// on this instance (on the others within the refresh interval).
	s.auth.expire()
	s.cfg.Logger.Info("token created over the admin API", "token_id", tok.ID, "name", tok.Name, "scopes", tok.Scopes, "by", tokenName(r))
	writeJSON(w, http.StatusCreated, CreatedToken{Token: tokenJSON(tok), Secret: secret, Note: shownOnce})
}

// handleRevokeToken revokes a token. It is idempotent: revoking a revoked
// token answers 200 with the time of the first revocation; an unknown ID
// is a 404 unknown_token.
func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if tid, _, ok := token.Parse(id); ok {
		// A whole token where its ID belongs: revoke it, since it has
		// now been sent in a URL. It is never quoted back.
		id = tid
	}
	t, err := s.cfg.TokenAdmin.RevokeToken(r.Context(), id)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	// Refused at once on this instance, even if the store becomes
	// unreachable before the next read (the others: within
	// AuthConfig.MaxStale at worst).
	s.auth.revoke(t.ID)
	s.cfg.Logger.Warn("token revoked over the admin API", "token_id", t.ID, "name", t.Name, "by", tokenName(r))
	writeJSON(w, http.StatusOK, tokenJSON(t))
}
