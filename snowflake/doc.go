// Package snowflake mints time-ordered 63-bit IDs: milliseconds since an
// epoch, a worker ID and a sequence, in a configurable Layout (41/10/12 by
// default).
//
// A worker ID is leased from a store (see package lease), never configured by
// hand, and the lease fences the IDs themselves: a holder only issues
// timestamps inside its own lease window, which ends a margin before the
// lease expires, and the next holder of the same worker ID only issues
// timestamps after that window. A process paused past its lease that wakes up
// and mints one more ID therefore cannot collide with the new holder.
//
//	node, err := snowflake.Start(ctx, snowflake.Config{
//		Layout: snowflake.DefaultLayout(),
//		Store:  lease.NewPostgres(pool),
//		Holder: "host-1234",
//	})
//	id, err := node.Next(ctx)
//	defer node.Close(ctx) // releases the worker ID
//
// Time comes from the monotonic clock (a wall-clock step changes nothing in a
// running process); the lease carries a time floor across restarts. A clock
// that goes backwards costs a bounded wait or an error, never a duplicate.
// The package knows no SQL and no HTTP.
package snowflake
