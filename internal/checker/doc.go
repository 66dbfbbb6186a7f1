// Package checker checks that handed-out IDs are unique, in the style of
// Jepsen's unique-ids checker: clients record every request they attempt and
// every ID acknowledged to them, and the report says how many were
// acknowledged, which IDs were acknowledged more than once (must be none),
// the lowest and highest ID, the holes in between, and the places where one
// client saw an ID not above the one before (per client and tag).
//
//	c := checker.New()
//	c.Attempt()
//	id, err := client.Next(ctx, "order")
//	if err != nil {
//		c.Fail(err)
//	} else {
//		c.Ack("worker-1", "order", id)
//	}
//	r := c.Report()
//	fmt.Print(r)
//	if !r.Valid() { … }
//
// A client is one sequential caller of one instance: an instance hands out
// increasing IDs per tag, so a client that only talks to one instance must
// see them increase. Clients that spread their requests over several
// instances should use one client name per instance.
package checker
