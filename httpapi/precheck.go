package httpapi

import "net/http"

// Access names the access control a route sits behind, for Precheck.
type Access int

const (
	// AccessOpen asks no token (a route may still charge a limit).
	AccessOpen Access = iota
	// AccessIDs is the ID routes' (IDAccess): a token in the token mode.
	AccessIDs
	// AccessAdmin is the admin routes': a token, always.
	AccessAdmin
	// AccessMonitoring is /id/health's and /metrics': a token under
	// ProtectMonitoring. Only the bearer token counts here: a caller that
	// is not a browser has no login cookie.
	AccessMonitoring
)

// Precheck returns the refusal that access control a answers r whatever
// its body says, from r's headers alone: where a needs a token, none, or a
// malformed, unknown or revoked one; nil otherwise (to answer with
// WriteError). It reads no body, checks no scope and charges no limit: the
// route does all that, once it runs. rpcapi calls it before it reads a
// call's message, so that a caller the route would refuse costs no
// inflating or parsing of its body.
func (s *Server) Precheck(r *http.Request, a Access) error {
	switch {
	case a == AccessAdmin:
	case a == AccessIDs && s.cfg.Auth.IDs == AuthToken:
	case a == AccessMonitoring && s.cfg.Auth.ProtectMonitoring:
	default:
		return nil
	}
	if _, err := s.auth.authenticate(r); err != nil {
		return err
	}
	return nil
}
