package httpapi

import (
	"context"
	"html/template"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// MonitorCookie is the login cookie /id/login sets, for a person who opens
// the dashboard in a browser under ProtectMonitoring: a login session of a
// token whose only scope is monitor (session.go), never the token itself.
//
// The cookie is accepted only by GET and HEAD of /id/dashboard and of the
// /id/health it polls, never by /metrics (bearer tokens only), an ID or an
// admin route: a browser sends it by itself, so it must never let a page
// make a write. Its session is checked against the token store on every
// request, so revoking the token logs every browser out within a second,
// and it ends after AuthConfig.LoginSession. It is HttpOnly (no script
// reads it), SameSite=Strict (no other site's request carries it), Secure
// when served over TLS, scoped to the directory of the form (/id), and
// lasts at most as long as the browser session.
const MonitorCookie = "idmint_monitor_session"

// legacyCookie is the login cookie of earlier versions, which held the
// token itself at Path=/: a login and a logout delete it from the browser.
const legacyCookie = "idmint_monitor"

// maxLoginBody bounds the login form: one token.
const maxLoginBody = 4 << 10

type cookieLoginKey struct{}

// cookieUse says whether a monitoring route takes the login cookie.
type cookieUse uint8

const (
	// bearerOnly is /metrics: Prometheus sends a bearer token, and the
	// cookie's path does not reach it (setLoginCookie).
	bearerOnly cookieUse = iota
	// cookieToo is /id/health, which the dashboard polls.
	cookieToo
	// cookiePage is /id/dashboard: a browser without valid credentials
	// is sent to the login form.
	cookiePage
)

// monitoringAuth is monitoring's access check. On a route that takes the
// cookie (use), a GET or HEAD without an Authorization header may carry a
// login session instead: it is judged by the session alone.
func (s *Server) monitoringAuth(next http.Handler, use cookieUse) http.Handler {
	if !s.cfg.Auth.ProtectMonitoring {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			p         *core.Principal
			err       error
			viaCookie bool
		)
		if use != bearerOnly && r.Header.Get("Authorization") == "" &&
			(r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if cookies := r.CookiesNamed(MonitorCookie); len(cookies) > 0 {
				viaCookie = true
				p, err = s.session(r.Context(), cookies)
			}
		}
		if !viaCookie {
			p, err = s.core.Authorize(r.Context(), callerOf(r), core.AccessMonitoring)
		}
		if err != nil {
			if use == cookiePage && core.Lookup(err).Code == wire.CodeUnauthorized && strings.Contains(r.Header.Get("Accept"), "text/html") {
				// A fixed, relative target: /id/login beside the page.
				seeOther(w, "login")
				return
			}
			s.WriteError(w, r, err)
			return
		}
		if viaCookie {
			r = r.WithContext(context.WithValue(r.Context(), cookieLoginKey{}, true))
		}
		next.ServeHTTP(w, withPrincipal(r, p))
	})
}

// loggedIn reports whether r was let in by the login cookie.
func loggedIn(r *http.Request) bool {
	v, _ := r.Context().Value(cookieLoginKey{}).(bool)
	return v
}

// mountLogin serves the login form under ProtectMonitoring. Its POSTs are
// refused when they come from another origin (login CSRF: a page making a
// browser log in with the attacker's token), by Go's cross-origin
// protection (Sec-Fetch-Site, else Origin against Host).
func (s *Server) mountLogin(r chi.Router) {
	if !s.cfg.Auth.ProtectMonitoring {
		return
	}
	cop := http.NewCrossOriginProtection()
	sameOrigin := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := cop.Check(r); err != nil {
				s.WriteError(w, r, core.Forbidden("cross-origin request refused"))
				return
			}
			h(w, r)
		}
	}
	r.Get("/id/login", func(w http.ResponseWriter, r *http.Request) {
		writeLoginPage(w, http.StatusOK, "")
	})
	r.Post("/id/login", sameOrigin(s.handleLogin))
	r.Post("/id/logout", sameOrigin(func(w http.ResponseWriter, r *http.Request) {
		setLoginCookie(w, r, "", -1)
		seeOther(w, "login")
	}))
}

// errLoginRefused is the one answer to a token the form does not take:
// malformed, made up, revoked or with other scopes than monitor alike, so
// that the form tells nothing of which tokens exist.
var errLoginRefused = newError(wire.CodeUnauthorized,
	"invalid or revoked token, or not a token whose only scope is monitor (idmint token create --scope monitor)")

// errLoginUnchecked is the login form's 503: no token can be checked now.
var errLoginUnchecked = newError(wire.CodeUnavailable, "tokens cannot be checked right now; try again later")

// handleLogin checks the form's token as a bearer token is checked and
// sets a login session of it as the cookie. Each attempt is charged to
// the address's login budget before the body is read. The token comes
// from the body only, never from the URL (which logs and histories keep),
// and is never echoed. Only a token whose only scope is monitor is taken
// (principal.monitorOnly), and every other token gets the same reply.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	now := s.cfg.Now()
	if err := s.core.ChargeLogin(callerOf(r).Host()); err != nil {
		s.refuseLogin(w, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		s.refuseLogin(w, newError(wire.CodeBadRequest, "send the login form"))
		return
	}
	// Before the token is looked at: during an outage a token seen
	// revoked and one never seen get the same 503.
	if err := s.core.TokensCheckable(r.Context()); err != nil {
		s.refuseLogin(w, errLoginUnchecked)
		return
	}
	p, err := s.core.CheckToken(r.Context(), strings.TrimSpace(r.PostForm.Get("token")))
	switch {
	case err != nil && core.Lookup(err).Code == wire.CodeUnavailable: // the store went away since
		s.refuseLogin(w, errLoginUnchecked)
		return
	case err != nil || !p.MonitorOnly():
		s.refuseLogin(w, errLoginRefused)
		return
	}
	setLoginCookie(w, r, newSession(p.Token(), now.Add(s.cfg.Auth.LoginSession)), 0)
	seeOther(w, "dashboard")
}

// refuseLogin answers a refused login with the form again, saying err's
// message, with the status, Retry-After and refusal count of err's row of
// errorTable.
func (s *Server) refuseLogin(w http.ResponseWriter, err error) {
	rule := core.Lookup(err)
	if rule.Refusal && !core.Counted(err) {
		s.cfg.Metrics.refusedCounter().WithLabelValues(rule.Code).Inc()
	}
	setRetryAfter(w, rule, err)
	writeLoginPage(w, statusOf(rule), err.Error())
}

// setLoginCookie sets the login cookie to value (maxAge -1 deletes it)
// and deletes the legacy one. The cookie has no Path attribute, so that a
// browser scopes it to the directory of the form's URL (RFC 6265 5.1.4):
// /id, or /prefix/id behind a proxy that mounts idmint under a prefix,
// which holds the dashboard and the /id/health it polls. Cookies are not
// scoped by port, so every service on the host name gets the cookie on
// its paths under /id and only there; /metrics, which every exporter on a
// host serves, is left to bearer tokens.
func setLoginCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	secure := secureRequest(r)
	http.SetCookie(w, &http.Cookie{Name: MonitorCookie, Value: value, MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
	http.SetCookie(w, &http.Cookie{Name: legacyCookie, Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
}

// seeOther redirects to target, a fixed path relative to the request's
// (/id/login beside /id/dashboard), kept relative so that it also works
// behind a proxy that mounts idmint under a prefix; http.Redirect would
// make it absolute.
func seeOther(w http.ResponseWriter, target string) {
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusSeeOther)
}

// secureRequest reports whether the browser reached r over HTTPS: TLS
// here, or at a proxy that says so. Believing a forged header only adds the
// Secure attribute, which keeps the cookie off plain HTTP.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>idmint · log in</title>
<style>body{font:15px system-ui,sans-serif;background:#0d1117;color:#e6edf3;display:grid;place-items:center;height:90vh}
form{display:grid;gap:10px;min-width:340px}input,button{font:inherit;padding:8px}.err{color:#f85149}</style></head>
<body><form method="post" action="login" autocomplete="off">
<h1>idmint</h1>
<label for="token">Monitor token</label>
<input id="token" name="token" type="password" required autofocus>
{{if .}}<p class="err" id="error">{{.}}</p>{{end}}
<button type="submit">Log in</button>
</form></body></html>
`))

// writeLoginPage answers with the login form and msg, if any.
func writeLoginPage(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	loginPage.Execute(w, msg)
}
