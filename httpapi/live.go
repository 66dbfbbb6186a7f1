package httpapi

import "net/http"

// liveBody is the whole reply of /id/live: it tells nothing but that the
// process answers.
var liveBody = []byte(`{"status":"alive"}` + "\n")

// handleLive answers /id/live, a liveness check for process supervisors
// (a Kubernetes livenessProbe): 200 whenever the HTTP server answers. It
// asks neither the database nor the buffers and needs no token, so that a
// database outage, which a restart cannot cure, never restarts an instance
// and throws away the IDs it holds in memory; /id/health is the readiness
// check.
func handleLive(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(liveBody)
}
