// Package region is the arithmetic of a deployment of several regions, each
// with its own database, that share one ID space: which IDs a region's
// database may grant (its share), and whether two regions' shares can be
// told apart.
//
// A share is a list of epochs. An epoch [From, To) is cut into blocks of
// Block IDs; block j = (id - From) / Block belongs to region j mod N, where
// N is len(Regions). A database grants only the IDs of its own blocks:
//
//	s := region.Share{Name: "us", Epochs: []region.Epoch{{From: 1, Block: 1000, Regions: []string{"eu", "us"}, Index: 1}}}
//	first, last, _ := s.NextOwned(0) // 1001, 2000: block 1 is us's
//
// The same arithmetic runs in PostgreSQL (the function idmint_next_owned,
// migration 00010) and in the SQLite store's write transaction; the tests
// of both stores hold them to this package.
package region
