package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// A login session is what the login cookie (MonitorCookie) holds once
// /id/login has taken a monitor token:
//
//	v1.<token ID>.<end, Unix seconds>.<MAC>
//
// where MAC is HMAC-SHA256 over the version, the token's ID and the end,
// keyed by the token's hash as the token store keeps it (the SHA-256 of
// its secret), in unpadded base64url. Why this shape:
//
//   - The cookie holds no secret. Cookies are not scoped by port, so every
//     service on the host name receives it; what one of them keeps opens
//     the dashboard until the session ends or the token is revoked, and
//     never yields the token (nor anything that takes IDs or administers).
//   - Nothing is held in memory: there is no session table an attacker
//     could fill, and every instance that reads the same token store
//     checks every session, across restarts and behind a load balancer
//     (each by its own clock, sessionSkew apart at most).
//   - The key is found only in the entry of a valid token: a session is
//     checked against the token store on every request (the same copy
//     bearer tokens are checked against), and ends with its token's
//     revocation.
//   - Only a session of a token whose only scope is monitor is taken, so a
//     value another application set, or one forged by the holder of some
//     other token, opens nothing.
//
// The price: whoever can read the token table can make a session for any
// monitor token (such a reader sees the database itself anyway), and a
// logout deletes the browser's cookie, not a copy made before: that copy
// lives until its end, or until the token is revoked.
const sessionVersion = "v1"

const (
	// maxSessionLen bounds a cookie value looked at (a session is 74
	// bytes).
	maxSessionLen = 96
	// maxSessionCookies bounds the login cookies of one request that are
	// tried: another application on the host can set one of the same
	// name, which must neither get in nor shut the browser out.
	maxSessionCookies = 4
	// sessionSkew is how far the clocks of the instances that check one
	// session may differ: a session may end that much past
	// LoginSession from now.
	sessionSkew = time.Minute
)

// errSessionRefused is the 401 of a login cookie that is not a live
// session of a monitor token. The dashboard page sends the browser to the
// form on it.
var errSessionRefused = core.Unauthorized("invalid_token", "the login session is invalid, has ended, or its token was revoked: log in again at /id/login")

// newSession returns a login session of t that ends at end.
func newSession(t token.Token, end time.Time) string {
	e := end.Unix()
	return sessionVersion + "." + t.ID + "." + strconv.FormatInt(e, 10) + "." +
		base64.RawURLEncoding.EncodeToString(sessionMAC(t, e))
}

// sessionMAC is the MAC of a session of t that ends at end (Unix seconds).
func sessionMAC(t token.Token, end int64) []byte {
	m := hmac.New(sha256.New, t.Hash)
	m.Write([]byte("idmint login session " + sessionVersion + "\x00" + t.ID + "\x00"))
	m.Write(strconv.AppendInt(nil, end, 10))
	return m.Sum(nil)
}

// parseSession splits a cookie value into a session's parts. It looks only
// at the value's shape.
func parseSession(v string) (id string, end int64, mac []byte, ok bool) {
	if len(v) > maxSessionLen {
		return "", 0, nil, false
	}
	rest, ok := strings.CutPrefix(v, sessionVersion+".")
	if !ok {
		return "", 0, nil, false
	}
	id, rest, _ = strings.Cut(rest, ".")
	endText, macText, _ := strings.Cut(rest, ".")
	end, err := strconv.ParseInt(endText, 10, 64)
	if !token.ValidID(id) || err != nil || end <= 0 || strconv.FormatInt(end, 10) != endText {
		return "", 0, nil, false
	}
	if mac, err = base64.RawURLEncoding.DecodeString(macText); err != nil || len(mac) != sha256.Size {
		return "", 0, nil, false
	}
	return id, end, mac, true
}

// session returns the principal of the first of cookies that is a live
// session of a monitor-only token, or the 401 (or the 503 of a token store
// that cannot be read) to answer.
func (s *Server) session(ctx context.Context, cookies []*http.Cookie) (*core.Principal, error) {
	now := s.cfg.Now()
	for _, c := range cookies[:min(len(cookies), maxSessionCookies)] {
		p, err := s.checkSession(ctx, c.Value, now)
		if err == nil || core.Lookup(err).Code == wire.CodeUnavailable {
			return p, err
		}
	}
	return nil, errSessionRefused
}

// checkSession returns the principal of the session v at now, or why not.
func (s *Server) checkSession(ctx context.Context, v string, now time.Time) (*core.Principal, error) {
	id, end, mac, ok := parseSession(v)
	if !ok {
		return nil, errSessionRefused
	}
	// Ended, or ending later than one made now could: a shorter
	// LoginSession shortens the sessions already made.
	if left := time.Unix(end, 0).Sub(now); left <= 0 || left > s.cfg.Auth.LoginSession+sessionSkew {
		return nil, errSessionRefused
	}
	p, err := s.core.LookupToken(ctx, id)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(mac, sessionMAC(p.Token(), end)) || !p.MonitorOnly() {
		return nil, errSessionRefused
	}
	return &p, nil
}
