package main

import (
	"runtime/debug"
	"testing"
)

// TestTuneGC: serve runs the collector at serveGCPercent unless GOGC says
// otherwise, and an explicit GOGC is left as the runtime read it.
func TestTuneGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	t.Setenv("GOGC", "")
	if got := tuneGC(); got != serveGCPercent {
		t.Fatalf("tuneGC() = %d without GOGC, want %d", got, serveGCPercent)
	}
	if got := debug.SetGCPercent(serveGCPercent); got != serveGCPercent {
		t.Fatalf("GC percent %d after tuneGC without GOGC, want %d", got, serveGCPercent)
	}

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // what the runtime read from GOGC=150 at start
	if got := tuneGC(); got != 150 {
		t.Fatalf("tuneGC() = %d with GOGC=150, want 150", got)
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Fatalf("GC percent %d after tuneGC with GOGC=150, want it left at 150", got)
	}
}
