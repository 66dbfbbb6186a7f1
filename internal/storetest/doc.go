// Package storetest is the contract every allocator.Store keeps, written
// once and run against each implementation (MemStore, SQLite, Postgres):
//
//	func TestSQLite_Contract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Store { return openSQLite(t) })
//	}
//
// open must return an empty, ready store each time it is called.
package storetest
