package sqlstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
)

// TokenColumns are the columns of idmint_tokens a token.Token is read
// from, in ScanToken's order.
const TokenColumns = `id, name, secret_hash, scopes, COALESCE(ids_per_second, 0), created_at, revoked_at`

// HolderArgs returns h as the segment log stores it: NULL and NULL for an
// instance's own segment.
func HolderArgs(h allocator.Holder) (principal, hash any) {
	if h.IsZero() {
		return nil, nil
	}
	return h.Principal, h.KeyHash[:]
}

// ScanHolder reads a Holder from the segment log's columns.
func ScanHolder(principal *string, hash []byte) (allocator.Holder, error) {
	switch {
	case principal == nil && hash == nil:
		return allocator.Holder{}, nil
	case principal == nil || len(hash) != len(allocator.Holder{}.KeyHash):
		return allocator.Holder{}, errors.New("segment log row with a partial holder")
	}
	h := allocator.Holder{Principal: *principal}
	copy(h.KeyHash[:], hash)
	return h, nil
}

// RefuseStranger reads a request's holder from row (principal,
// holder_hash) and returns allocator.ErrNotHolder unless it is h. A request without a
// row (noRows) is nobody's: nil.
func RefuseStranger(row RowScanner, noRows error, id uuid.UUID, h allocator.Holder) error {
	var (
		owner   *string
		ownHash []byte
	)
	err := row.Scan(&owner, &ownHash)
	if errors.Is(err, noRows) {
		return nil
	}
	if err != nil {
		return err
	}
	own, err := ScanHolder(owner, ownHash)
	if err != nil {
		return err
	}
	if !own.Matches(h) {
		return fmt.Errorf("%w: request %s", allocator.ErrNotHolder, id)
	}
	return nil
}

// GivenBack is the answer of a GiveBackRange transaction that changed n
// tags and ended with err.
func GivenBack(n int64, err error, tag string, first, last int64) (bool, error) {
	if errors.Is(err, allocator.ErrNotHolder) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}

// TagColumns are the columns of idmint_tags an allocator.Tag is read from,
// in ScanTag's order.
const TagColumns = `biz_tag, max_id, step, COALESCE(max_step, 0), description, runway_ms`

// RowScanner is a row of pgx or database/sql.
type RowScanner interface{ Scan(dest ...any) error }

// ScanTag reads a tag from row (TagColumns).
func ScanTag(row RowScanner) (allocator.Tag, error) {
	var t allocator.Tag
	var runwayMS int64
	if err := row.Scan(&t.Name, &t.MaxID, &t.Step, &t.MaxStep, &t.Description, &runwayMS); err != nil {
		return allocator.Tag{}, err
	}
	t.Runway = time.Duration(runwayMS) * time.Millisecond
	return t, nil
}
