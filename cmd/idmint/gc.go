package main

import (
	"os"
	"runtime/debug"
)

// serveGCPercent is serve's GOGC when the environment sets none. A warm
// idmint keeps a few MiB live (routes, descriptors, metrics, buffers) and
// allocates a few KiB per request in net/http: at Go's default of 100 the
// collector runs every couple of MiB, dozens of times a second under load,
// and its marking and write barriers cost about a tenth of GET /id's CPU.
// At 200 it runs a third as often for a few MiB more of heap (about 3 MiB
// at one warm tag); an explicit GOGC (GOGC=100, GOGC=off) wins.
const serveGCPercent = 200

// tuneGC sets serveGCPercent unless GOGC is set, and returns the percent in
// force (-1: off).
func tuneGC() int {
	if v, ok := os.LookupEnv("GOGC"); ok && v != "" {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(serveGCPercent)
	return serveGCPercent
}
