// Package token is idmint's bearer tokens: their shape, their hashing,
// their scopes and the Store that keeps them. A token reads
// idm_<id>_<secret>; only the SHA-256 of its secret is stored.
//
//	t, bearer, err := token.New("billing", []string{"ids:order"})
//	t, err = store.CreateToken(ctx, t) // show bearer once, keep nothing else
//	id, secret, ok := token.Parse(bearer)
//	ok = ok && t.ID == id && t.Matches(secret)
//
// Scopes: admin (the /v1 admin API), monitor (health and metrics when
// they are protected), ids (IDs of every tag), ids:TAG and ids:PREFIX*.
// Every allocator.Store is a token.Store.
package token
