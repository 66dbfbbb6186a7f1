// Package storetest is the contract every allocator.Store keeps, written
// once and run against each backend (memstore, sqlite, postgres):
//
//	func TestStore_Contract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Store { return openSQLite(t) })
//	}
//
// open must return an empty, ready store each time it is called. Every
// clause runs on every backend: the contract is allocator.Store, whole.
// Hammer and NewAllocator are the uniqueness run each backend's tests share.
package storetest
