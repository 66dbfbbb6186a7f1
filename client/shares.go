package client

import (
	"errors"
	"fmt"
	"sync"

	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// ErrSharesOverlap means that two of the client's regions sent shares of
// the ID space that may overlap, or that a region's reply came from a
// database of another region or of none: the client may have been given
// the same ID by two regions. It hands out no ID from then on (a gap,
// never a duplicate), and every call returns this error; it is never
// worth a retry: the deployment's shares must be fixed (docs/regions.md).
var ErrSharesOverlap = errors.New("the regions' shares may overlap: the client hands out no more ids")

// shares holds the share each region sent with its last range: what a
// client of several regions checks every range against. Checking and
// recording are one step, so that two regions answering at once cannot
// each be checked before the other is known.
type shares struct {
	mu sync.Mutex
	// last is the share of each region (by index) that sent one.
	last map[int]wire.Share
	// conflict is the first disagreement seen; sticky.
	conflict error
}

// check reports whether r's range [first, last], granted with share s,
// can be served: with one region there is nothing to compare; with
// several, s must be r's own (named as the client names r) and own the
// range, and the range must hold no ID another region's share may grant
// (wire.Share.CheckRange). Otherwise the error wraps ErrSharesOverlap and
// stays: every later check fails with it.
func (sh *shares) check(regions []*region, r *region, first, last int64, s *wire.Share) error {
	if len(regions) == 1 {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.conflict != nil {
		return sh.conflict
	}
	var err error
	switch {
	case s == nil:
		err = fmt.Errorf("region %q answered a range without a share: its database has none and may grant any id", r.name)
	case s.Name != r.name:
		err = fmt.Errorf("region %q answered with the share of region %q: its URLs reach another region's instances", r.name, s.Name)
	case !s.OwnsRange(first, last):
		err = fmt.Errorf("region %q granted [%d, %d], outside its share %v", r.name, first, last, s.Epochs)
	default:
		for _, o := range regions {
			if other, ok := sh.last[o.index]; ok && o != r {
				if e := s.CheckRange(first, last, other); e != nil {
					err = fmt.Errorf("region %q's range [%d, %d] against region %q's share: %w", r.name, first, last, o.name, e)
					break
				}
			}
		}
	}
	if err != nil {
		sh.conflict = fmt.Errorf("%w: %w", ErrSharesOverlap, err)
		return sh.conflict
	}
	sh.last[r.index] = *s
	return nil
}

// err returns the conflict seen, nil while none was.
func (sh *shares) err() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.conflict
}

// refuseAll makes the client hand out nothing more once its regions'
// shares conflict: the stint serving is replaced by an empty one whose
// every load is refused (rangeSource), so that no ID of any buffer is
// handed out after the conflict is known. The stint left gives back its
// tails to its own region, as a return home does.
func (c *Client) refuseAll(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.refusing {
		return
	}
	c.refusing = true
	c.cfg.Logger.Error("REFUSING every call: two regions' shares may overlap; no id is handed out until the shares are fixed and the client is made again", "err", err)
	c.switchLocked(c.newStint(c.serving.Load().region))
}

// conflictRefusal is what a Set's load is answered once the shares
// conflict: a refusal, final.
func (c *Client) conflictRefusal() error {
	if err := c.shares.err(); err != nil {
		return segment.Classify(segment.ErrRefused, err)
	}
	return nil
}
