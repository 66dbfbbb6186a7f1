// Package helm checks the idmint Helm chart in idmint/ without a cluster:
// its tests render the chart with Helm's Go library (a client-only dry-run
// install, as `helm template` does), run Helm's linter, and decode every
// rendered object strictly into the Kubernetes API types, so that a
// misspelt field fails instead of being dropped by the API server.
//
//	cd deploy/helm && go test ./...    (make test-helm)
//
// It is a module of its own so that the server's go.mod stays free of Helm
// and Kubernetes.
package helm
