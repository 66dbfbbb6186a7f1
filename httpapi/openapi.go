package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 document of every route, served at
// /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(OpenAPI)
}
