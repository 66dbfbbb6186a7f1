// Package allocator hands out IDs for many business tags. It owns one
// segment.Buffer per tag, loaded lazily on the tag's first request, and the
// background loads that refill them from a Store.
//
// Every load is one allocation with one identity: a UUIDv7 request ID chosen
// before the first attempt and reused by every retry, so a request can never
// be granted twice. When the reply to an allocation is lost the allocator
// looks the request ID up and uses the range that was committed; when it
// cannot tell, it treats the range as used (a gap, never a duplicate), and
// every range that is never served is logged and counted as abandoned. Each
// request carries the highest ID the instance was granted for the tag: a
// store whose max_id went back below it raises max_id there first.
//
//	store, err := postgres.Open(ctx, databaseURL) // allocator/postgres
//	a := allocator.New(allocator.Config{Store: store, Instance: "instance-1"})
//	defer a.Close(ctx)
//	id, err := a.Next(ctx, "order")
//
// GrantRange and GiveBackRange serve callers that keep their own buffers
// (the client package): a range goes straight from the store to the caller
// under the caller's request ID, and is never served by the allocator.
//
// Words used throughout the package and its backends:
//   - a segment is the IDs the store grants this instance for a tag, to
//     serve from the tag's buffer (Request, Segment, load);
//   - a range is the IDs the store grants a caller straight (GrantRange),
//     served by the caller alone; segment.Range, a span of consecutive IDs,
//     names either kind, or a part of one;
//   - grant is the act: the store grants a request ID one segment or range,
//     once; the tag's floor is the highest ID granted in its segments here;
//   - give back is the one verb for returning IDs: the unused tail of an
//     instance's segment when it closes (Store.GiveBack) or of a caller's
//     range, checked against its holder (Store.GiveBackRange,
//     Allocator.GiveBackRange), allowed only while nobody was granted
//     anything above it; the segment log records it (returned_from). IDs
//     granted and never handed out nor given back are abandoned: a gap,
//     logged and counted.
//
// Store is the whole contract a backend keeps: Granter (grants, lookups,
// give-backs), Admin (tags) and token.Store (bearer tokens); the Allocator
// uses it whole, without asking which parts a store has. Each backend is its
// own package beside this one: postgres is the production Store (with the
// replication checks that go with it); sqlite keeps the same guarantees in
// one file for the processes of a single machine; memstore is an in-memory
// one for tests and for programs that need IDs unique within one process.
// testkit/storetest is the contract suite every backend runs.
package allocator
