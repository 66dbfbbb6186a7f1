package httpapi

import (
	"context"
	"html/template"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// MonitorCookie is the cookie /id/login sets: a monitor token, for a person
// who opens the dashboard in a browser under ProtectMonitoring.
//
// The cookie is accepted only by the read-only monitoring GETs (/id/health,
// /id/dashboard, /metrics), never by an ID or admin route: a browser sends
// it by itself, so it must never let a page make a write. It is checked
// against the token store as a bearer token is, so a revoked token logs
// every browser out within a second. It is HttpOnly (no script reads it),
// SameSite=Strict (no other site's request carries it), Secure when served
// over TLS, and lasts as long as the browser session.
const MonitorCookie = "idmint_monitor"

// maxLoginBody bounds the login form: one token.
const maxLoginBody = 4 << 10

type cookieLoginKey struct{}

// monitoringAuth is monitoring's access check. A request without an
// Authorization header may carry the login cookie instead, on GET and HEAD
// only. On the dashboard page (page true) a browser without valid
// credentials is sent to the login form.
func (s *Server) monitoringAuth(next http.Handler, page bool) http.Handler {
	if !s.cfg.Auth.ProtectMonitoring {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			p   *principal
			err *apiError
		)
		c, noCookie := r.Cookie(MonitorCookie)
		viaCookie := noCookie == nil && r.Header.Get("Authorization") == "" &&
			(r.Method == http.MethodGet || r.Method == http.MethodHead)
		if viaCookie {
			p, err = s.auth.check(r.Context(), c.Value)
		} else {
			p, err = s.auth.authenticate(r)
		}
		switch {
		case err != nil:
		case viaCookie && !p.monitor:
			err = forbidden("the login cookie needs a token with the monitor scope")
		case !p.monitor && !p.admin:
			err = forbidden("this token's scopes do not include monitor")
		}
		if err != nil {
			if page && err.code == CodeUnauthorized && strings.Contains(r.Header.Get("Accept"), "text/html") {
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
				s.WriteError(w, r, forbidden("cross-origin request refused"))
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
		http.SetCookie(w, &http.Cookie{Name: MonitorCookie, Value: "", Path: "/", MaxAge: -1,
			HttpOnly: true, Secure: secureRequest(r), SameSite: http.SameSiteStrictMode})
		seeOther(w, "login")
	}))
}

// handleLogin checks the form's token as a bearer token is checked and
// sets it as the cookie. The token comes from the body only, never from
// the URL (which logs and histories keep), and is never echoed. Only a
// token whose only scope is monitor is taken: a browser keeps the cookie,
// and one that could take IDs or administer would be worth stealing.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		writeLoginPage(w, http.StatusBadRequest, "send the login form")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	p, err := s.auth.check(r.Context(), token)
	switch {
	case err != nil && err.code == CodeUnavailable:
		writeLoginPage(w, http.StatusServiceUnavailable, "tokens cannot be checked right now; try again later")
		return
	case err != nil:
		writeLoginPage(w, http.StatusUnauthorized, "invalid or revoked token")
		return
	case !p.monitor || p.admin || p.hasIDScope():
		writeLoginPage(w, http.StatusForbidden, "log in with a token whose only scope is monitor (idmint token create --scope monitor)")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: MonitorCookie, Value: token, Path: "/",
		HttpOnly: true, Secure: secureRequest(r), SameSite: http.SameSiteStrictMode})
	seeOther(w, "dashboard")
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
