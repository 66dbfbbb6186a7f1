package main

// serveArgs is the serve flags of these tests' processes: a 5 s
// --wait-timeout, then more (which win).
func serveArgs(more ...string) []string {
	return append([]string{"--wait-timeout", "5s"}, more...)
}
