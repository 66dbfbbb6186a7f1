// Package client hands out idmint IDs inside the calling process, at the
// speed of an atomic add, from ranges that idmint instances grant it.
//
// Per tag, a Client keeps the double buffer the server keeps
// (segment.Buffer): it serves IDs from its current range and fetches the
// next one in the background, sized so that one range lasts about
// Segment.Period (the dynamic step, bounded by the tag's step and
// max_step). A range comes from POST /v1/segments on one of the configured
// instances.
//
// Every range has one identity: a UUIDv7 request ID chosen before the first
// attempt and reused on every retry, on every instance, until an instance
// answers. An instance grants a request ID once; a retry after a lost reply,
// a reset connection or a killed instance gets the same range back. So a
// range granted by the database reaches the client exactly once, and no
// range is ever served by two clients or by a client and an instance.
//
//	c, err := client.New(ctx, client.Config{URLs: []string{"http://idmint-1:8080", "http://idmint-2:8080"}})
//	defer c.Close(ctx) // gives back the unused tail of each tag's newest range
//	id, err := c.Next(ctx, "order")
//
// With Config.Regions, the client knows several regions (each its own
// database, owning a disjoint share of every tag's IDs) in order of
// preference. It serves from home, moves to the next region when the one it
// serves from cannot grant within the wait, and returns home once a probe
// finds home granting again. Each stint in a region has its own requests:
// none is looked up, sent again or given back in another region, and one
// left unsettled in a region the client left is given up (a gap, never a
// duplicate). See docs/clients.md, "Regions".
//
// Tracing: the client makes no span and depends on no tracing library; a
// Config.HTTPClient whose transport is otelhttp.NewTransport propagates
// the caller's trace on every request made for it (see Config.HTTPClient).
//
// The package depends on no idmint package but segment.
package client
