// Package region is what a deployment of several regions, each with its
// own database, needs beyond the share's arithmetic (wire/share, named here
// as region.Share and region.Epoch): claiming a share, splitting and
// fencing shares to add or retire a region, and the bounds a database's
// tags must keep inside its share.
//
//	s := region.Share{Name: "us", Epochs: []region.Epoch{{From: 1, Block: 1000, Regions: []string{"eu", "us"}, Index: 1}}}
//	first, last, _ := s.NextOwned(0) // 1001, 2000: block 1 is us's
//
// The same arithmetic runs in PostgreSQL (the function idmint_next_owned,
// migration 00010) and in the SQLite store's write transaction; the tests
// of both stores hold them to this package.
package region
