// Package lease keeps Snowflake worker-ID leases in the database idmint
// already has (PostgreSQL or the SQLite file), so no ZooKeeper or etcd is
// needed. It implements snowflake.LeaseStore.
//
//	node, err := snowflake.Start(ctx, snowflake.Config{
//		Layout: snowflake.DefaultLayout(),
//		Store:  lease.NewPostgres(pool),
//		Holder: "host-1234",
//	})
//
// One row per worker ID holds its holder, a fencing epoch that grows with
// every new holder, the lease's expiry and a time floor, all by the
// database's clock. Acquiring is one atomic step that takes a free or
// expired row and bumps its epoch; renewing and releasing name the epoch, so
// a holder whose lease was taken over can do neither. Memory is the same
// contract in memory, for tests.
package lease
