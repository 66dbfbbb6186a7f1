package snowflake

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idmint/idmint/wire"
)

// Errors of the package.
var (
	// ErrInvalidLayout means a Layout's widths or epoch are out of bounds.
	ErrInvalidLayout = errors.New("invalid snowflake layout")
	// ErrInvalidID means a number is not an ID of the layout.
	ErrInvalidID = wire.ErrInvalidSnowflake
	// ErrNoWorker means this instance holds no worker ID: every worker ID is
	// leased by another instance, or the store cannot be reached to lease one.
	ErrNoWorker = wire.ErrSnowflakeNoWorker
	// ErrLeaseExpired means the lease window ended before a renewal
	// succeeded: no timestamp after it may be issued.
	ErrLeaseExpired = wire.ErrSnowflakeLeaseExpired
	// ErrClockSkew means the local clock and the database's differ by more
	// than the margin.
	ErrClockSkew = wire.ErrSnowflakeClockSkew
	// ErrClockBackwards means the clock is behind the last timestamp issued,
	// or the lease's time floor, by more than the longest wait.
	ErrClockBackwards = wire.ErrSnowflakeBackwards
	// ErrTimeExhausted means the milliseconds since the epoch no longer fit
	// the layout's time bits.
	ErrTimeExhausted = wire.ErrSnowflakeExhausted
	// ErrClosed means the node was closed.
	ErrClosed = wire.ErrClosed

	// ErrLayoutMismatch is returned by a LeaseStore whose database holds
	// leases of another layout.
	ErrLayoutMismatch = errors.New("the database holds snowflake leases of another layout")
	// ErrAllHeld is returned by LeaseStore.Acquire when every worker ID is
	// held by an unexpired lease.
	ErrAllHeld = errors.New("every snowflake worker id is leased")
	// ErrLeaseLost is returned by LeaseStore.Renew and Release when the
	// lease has a new holder (its epoch moved on) or was released.
	ErrLeaseLost = errors.New("snowflake worker lease lost")
)

// Bounds of the bit widths: sign bit 0, then time, worker and sequence bits
// summing to 63.
const (
	MinTimeBits     = 35 // about a year of milliseconds
	MaxTimeBits     = 55
	MinWorkerBits   = 1
	MaxWorkerBits   = 16 // 65,536 worker IDs: one lease row each
	MinSequenceBits = 1
	MaxSequenceBits = 22
)

// DefaultEpoch is the default start of time of the layout.
var DefaultEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Layout is how an ID's 63 bits split: from the top, milliseconds since
// Epoch, the worker ID, the sequence within the millisecond.
type Layout struct {
	Epoch        time.Time
	TimeBits     int
	WorkerBits   int
	SequenceBits int
}

// DefaultLayout is 41 bits of milliseconds (69 years) since DefaultEpoch,
// 10 bits of worker ID, 12 bits of sequence (4,096 IDs per millisecond per
// worker).
func DefaultLayout() Layout {
	return Layout{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SequenceBits: 12}
}

// Validate reports whether the widths sum to 63 and each is within its
// bounds, and whether the epoch is a whole millisecond, after 1970 and not
// in the future.
func (l Layout) Validate() error {
	switch {
	case l.TimeBits+l.WorkerBits+l.SequenceBits != 63:
		return fmt.Errorf("%w: %d+%d+%d bits: want time+worker+sequence = 63", ErrInvalidLayout, l.TimeBits, l.WorkerBits, l.SequenceBits)
	case l.TimeBits < MinTimeBits || l.TimeBits > MaxTimeBits:
		return fmt.Errorf("%w: %d time bits: want %d to %d", ErrInvalidLayout, l.TimeBits, MinTimeBits, MaxTimeBits)
	case l.WorkerBits < MinWorkerBits || l.WorkerBits > MaxWorkerBits:
		return fmt.Errorf("%w: %d worker bits: want %d to %d", ErrInvalidLayout, l.WorkerBits, MinWorkerBits, MaxWorkerBits)
	case l.SequenceBits < MinSequenceBits || l.SequenceBits > MaxSequenceBits:
		return fmt.Errorf("%w: %d sequence bits: want %d to %d", ErrInvalidLayout, l.SequenceBits, MinSequenceBits, MaxSequenceBits)
	case l.Epoch.UnixMilli() < 0 || !l.Epoch.Equal(time.UnixMilli(l.Epoch.UnixMilli())):
		return fmt.Errorf("%w: epoch %s: want a whole millisecond after 1970", ErrInvalidLayout, l.Epoch.UTC().Format(time.RFC3339Nano))
	case l.Epoch.After(time.Now()):
		return fmt.Errorf("%w: epoch %s is in the future", ErrInvalidLayout, l.Epoch.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ParseBits reads widths written as TIME/WORKER/SEQUENCE, e.g. "41/10/12",
// into l and validates l.
func (l *Layout) ParseBits(s string) error {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return fmt.Errorf("%w: %q: want TIME/WORKER/SEQUENCE bits, e.g. 41/10/12", ErrInvalidLayout, s)
	}
	var bits [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("%w: %q: want TIME/WORKER/SEQUENCE bits, e.g. 41/10/12", ErrInvalidLayout, s)
		}
		bits[i] = n
	}
	l.TimeBits, l.WorkerBits, l.SequenceBits = bits[0], bits[1], bits[2]
	return l.Validate()
}

// Bits returns the widths as TIME/WORKER/SEQUENCE.
func (l Layout) Bits() string {
	return fmt.Sprintf("%d/%d/%d", l.TimeBits, l.WorkerBits, l.SequenceBits)
}

// String returns the widths and the epoch.
func (l Layout) String() string {
	return l.Bits() + " since " + l.Epoch.UTC().Format(time.RFC3339Nano)
}

// MaxWorker is the largest worker ID.
func (l Layout) MaxWorker() int64 { return 1<<l.WorkerBits - 1 }

// MaxSequence is the largest sequence number within one millisecond.
func (l Layout) MaxSequence() int64 { return 1<<l.SequenceBits - 1 }

// MaxMillis is the largest number of milliseconds since the epoch.
func (l Layout) MaxMillis() int64 { return 1<<l.TimeBits - 1 }

// EpochMillis is the epoch in milliseconds since the Unix epoch.
func (l Layout) EpochMillis() int64 { return l.Epoch.UnixMilli() }

// inRange reports whether the Unix millisecond ms fits the layout's time
// bits: at or after the epoch, at most MaxMillis after it.
func (l Layout) inRange(ms int64) bool {
	since := ms - l.EpochMillis()
	return since >= 0 && since <= l.MaxMillis()
}

// compose packs an ID; the caller guarantees each part is in range.
func (l Layout) compose(sinceEpoch, worker, seq int64) int64 {
	return sinceEpoch<<(l.WorkerBits+l.SequenceBits) | worker<<l.SequenceBits | seq
}

// Parts is a decoded ID.
type Parts struct {
	ID int64
	// Time is when the ID was minted, to the millisecond; UnixMilli the same
	// as milliseconds since the Unix epoch.
	Time      time.Time
	UnixMilli int64
	Worker    int64
	Sequence  int64
}

// lastMilli is the last millisecond of year 9999, the last time RFC 3339
// (and JSON) can write.
var lastMilli = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()

// Parse decodes an ID of the layout. Any positive 63-bit number whose time
// is at most year 9999 decodes (with 48 time bits or more, larger numbers
// lie beyond it: no clock made them, and RFC 3339 cannot write their time).
func (l Layout) Parse(id int64) (Parts, error) {
	if id <= 0 {
		return Parts{}, fmt.Errorf("%w: %d: want a positive 63-bit integer", ErrInvalidID, id)
	}
	ms := id >> (l.WorkerBits + l.SequenceBits)
	if ms > lastMilli-l.EpochMillis() {
		return Parts{}, fmt.Errorf("%w: %d: its time is after year 9999", ErrInvalidID, id)
	}
	p := Parts{
		ID:       id,
		Worker:   id >> l.SequenceBits & l.MaxWorker(),
		Sequence: id & l.MaxSequence(),
	}
	p.UnixMilli = l.EpochMillis() + ms
	p.Time = time.UnixMilli(p.UnixMilli).UTC()
	return p, nil
}

// ParseString decodes an ID written in decimal.
func (l Layout) ParseString(s string) (Parts, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return Parts{}, fmt.Errorf("%w: %q: want a positive 63-bit decimal integer", ErrInvalidID, s)
	}
	return l.Parse(id)
}
