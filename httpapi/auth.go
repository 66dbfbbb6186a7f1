package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/segment"
)

// Access control is the core's (core.Core.Authorize and each operation's
// own checks); this file keeps what routes a program mounts beside
// idmint's use: IDAccess and AuthorizeTag.

type principalKey struct{}

// withPrincipal returns r carrying p, for AuthorizeTag.
func withPrincipal(r *http.Request, p *core.Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// IDAccess wraps routes that hand out IDs, which a program adds beside
// idmint's: the core's access control of the ID operations (a token with
// some ID scope in the token mode, the address's limit in the open mode),
// the query's count of IDs charged (else 1), the query's biz_tag checked
// against the token's scope. In the open mode without per-address limits it returns
// next itself: the hot path pays nothing. The handler calls AuthorizeTag
// once it knows the tag.
func (s *Server) IDAccess(next http.Handler) http.Handler {
	if s.cfg.Auth.IDs != AuthToken && s.cfg.Limits.IDsPerSecondPerAddress <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		tag, _ := queryTag(q)
		p, err := s.core.AdmitIDs(r.Context(), callerOf(r), tag, idsAsked(q, s.cfg.MaxCount))
		if err != nil {
			s.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, withPrincipal(r, p))
	})
}

// AuthorizeTag checks, for a handler behind IDAccess that learns its tag
// from the body, that the request may take IDs of tag. It returns nil in
// the open mode, and an error for WriteError otherwise.
func (s *Server) AuthorizeTag(r *http.Request, tag string) error {
	p, _ := r.Context().Value(principalKey{}).(*core.Principal)
	return s.core.AuthorizeTag(p, tag)
}

// Precheck returns the refusal that access control a answers r whatever
// its body says, from r's headers alone (core.Core.Precheck).
func (s *Server) Precheck(r *http.Request, a Access) error {
	return s.core.Precheck(r.Context(), callerOf(r), a)
}

// queryTag returns the query's biz_tag when the handler will accept it:
// given once and valid. Otherwise the handler answers 400 on its own.
func queryTag(q url.Values) (string, bool) {
	vals := q["biz_tag"]
	if len(vals) != 1 || segment.ValidateTag(vals[0]) != nil {
		return "", false
	}
	return vals[0], true
}

// idsAsked is how many IDs a request asks for, for the rate limits: a valid
// count, at most limit; 1 otherwise.
func idsAsked(q url.Values, limit int) int {
	if vals := q["count"]; len(vals) == 1 {
		if n, err := strconv.Atoi(vals[0]); err == nil && n >= 1 {
			return min(n, limit)
		}
	}
	return 1
}
