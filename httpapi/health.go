package httpapi

import (
	"net/http"

	"github.com/idmint/idmint/core"
)

// handleHealth serves /id/health (core: Health), behind monitoringAuth:
// 200 while the instance serves, 503 when it does not.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	vals, asked := r.URL.Query()["biz_tag"]
	tag := ""
	if asked {
		switch {
		case len(vals) == 0 || vals[0] == "":
			s.WriteError(w, r, core.ErrTagRequired)
			return
		case len(vals) > 1:
			s.WriteError(w, r, core.ErrTagTwice)
			return
		}
		tag = vals[0]
	}
	h, err := s.core.Health(r.Context(), tag, asked)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	status := http.StatusOK
	if h.Status == StatusUnavailable {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}
