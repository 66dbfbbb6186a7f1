// Package testutil holds the few helpers idmint's tests share, each taking
// testing.TB and bounded, so a failing test fails fast instead of hanging:
//
//	testutil.Eventually(t, 10*time.Second, "the first ID", func() bool { return n.Load() > 0 })
//	addr := testutil.FreeAddr(t) // "127.0.0.1:port", free a moment ago
//	status := testutil.GetJSON(t, base+"/id/health", &health)
package testutil
