package httpapi

import (
	"bytes"
	"embed"
	"net/http"
)

// dashboardFS holds the live dashboard: one HTML page with its CSS and
// JavaScript inline, so it works offline, needs no build step, and an
// operator can save it as a single file.
//
//go:embed dashboard.html
var dashboardFS embed.FS

// handleDashboard serves the page. It polls /id/health (a relative URL, so
// it also works behind a proxy that mounts idmint under a prefix).
func handleDashboard(w http.ResponseWriter, r *http.Request) {
	page, err := dashboardFS.ReadFile("dashboard.html")
	if err != nil { // cannot happen: the file is embedded
		http.Error(w, "dashboard missing", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	// Everything the page needs is inline or same-origin.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	h.Set("X-Content-Type-Options", "nosniff")
	if loggedIn(r) {
		page = bytes.Replace(page, []byte(`<form id="logout" method="post" action="logout" hidden>`), []byte(`<form id="logout" method="post" action="logout">`), 1)
	}
	w.Write(page)
}
