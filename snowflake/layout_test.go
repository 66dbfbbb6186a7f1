package snowflake_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idmint/idmint/snowflake"
)

func TestLayout_Validate(t *testing.T) {
	ok := snowflake.DefaultLayout()
	for _, c := range []struct {
		name   string
		change func(*snowflake.Layout)
		valid  bool
	}{
		{"default", func(*snowflake.Layout) {}, true},
		{"tiny worker space", func(l *snowflake.Layout) { l.TimeBits, l.WorkerBits = 50, 1 }, true},
		{"sum 62", func(l *snowflake.Layout) { l.SequenceBits = 11 }, false},
		{"sum 64", func(l *snowflake.Layout) { l.SequenceBits = 13 }, false},
		{"no worker bits", func(l *snowflake.Layout) { l.TimeBits, l.WorkerBits = 51, 0 }, false},
		{"17 worker bits", func(l *snowflake.Layout) { l.TimeBits, l.WorkerBits, l.SequenceBits = 41, 17, 5 }, false},
		{"no sequence bits", func(l *snowflake.Layout) { l.TimeBits, l.SequenceBits = 53, 0 }, false},
		{"34 time bits", func(l *snowflake.Layout) { l.TimeBits, l.WorkerBits, l.SequenceBits = 34, 16, 13 }, false},
		{"56 time bits", func(l *snowflake.Layout) { l.TimeBits, l.WorkerBits, l.SequenceBits = 56, 1, 6 }, false},
		{"epoch in the future", func(l *snowflake.Layout) { l.Epoch = time.Now().Add(time.Hour).Truncate(time.Millisecond) }, false},
		{"epoch before 1970", func(l *snowflake.Layout) { l.Epoch = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		{"epoch not a whole ms", func(l *snowflake.Layout) { l.Epoch = l.Epoch.Add(time.Microsecond) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := ok
			c.change(&l)
			err := l.Validate()
			if (err == nil) != c.valid {
				t.Fatalf("Validate(%s) = %v, want valid %v", l, err, c.valid)
			}
			if err != nil && !errors.Is(err, snowflake.ErrInvalidLayout) {
				t.Fatalf("error %v is not ErrInvalidLayout", err)
			}
		})
	}
}

func TestLayout_ParseBits(t *testing.T) {
	var l snowflake.Layout
	l.Epoch = snowflake.DefaultEpoch
	if err := l.ParseBits("42/9/12"); err != nil || l.TimeBits != 42 || l.WorkerBits != 9 || l.SequenceBits != 12 {
		t.Fatalf("ParseBits(42/9/12) = %+v, %v", l, err)
	}
	for _, bad := range []string{"", "41/10", "41/10/12/0", "a/10/12", "41/10/13", "41/-1/23"} {
		if err := l.ParseBits(bad); !errors.Is(err, snowflake.ErrInvalidLayout) {
			t.Errorf("ParseBits(%q) = %v, want ErrInvalidLayout", bad, err)
		}
	}
}

func TestLayout_Parse(t *testing.T) {
	l := snowflake.DefaultLayout()
	// 1000 ms after the epoch, worker 5, sequence 7.
	id := int64(1000)<<22 | 5<<12 | 7
	p, err := l.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Worker != 5 || p.Sequence != 7 || !p.Time.Equal(snowflake.DefaultEpoch.Add(time.Second)) || p.UnixMilli != snowflake.DefaultEpoch.UnixMilli()+1000 {
		t.Fatalf("Parse(%d) = %+v", id, p)
	}
	for _, bad := range []string{"0", "-5", "x", "9223372036854775808", ""} {
		if _, err := l.ParseString(bad); !errors.Is(err, snowflake.ErrInvalidID) {
			t.Errorf("ParseString(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
}

func FuzzLayout_ParseString(f *testing.F) {
	for _, s := range []string{"1", "4194325511", "9223372036854775807", "-1", "0x10", " 12", "1e9"} {
		f.Add(s)
	}
	l := snowflake.DefaultLayout()
	f.Fuzz(func(t *testing.T, s string) {
		p, err := l.ParseString(s)
		if err != nil {
			if !errors.Is(err, snowflake.ErrInvalidID) {
				t.Fatalf("ParseString(%q): %v is not ErrInvalidID", s, err)
			}
			return
		}
		if p.Worker < 0 || p.Worker > l.MaxWorker() || p.Sequence < 0 || p.Sequence > l.MaxSequence() {
			t.Fatalf("ParseString(%q) = %+v: out of range", s, p)
		}
		back := (p.UnixMilli-l.EpochMillis())<<22 | p.Worker<<12 | p.Sequence
		if back != p.ID {
			t.Fatalf("ParseString(%q) = %+v: recomposes to %d", s, p, back)
		}
	})
}

// TestLayout_ParseBeyondYear9999: with 48 time bits or more, large positive
// numbers decode to a time after year 9999, which no clock reaches and RFC
// 3339 cannot write (JSON encoding of the time fails): not an ID.
func TestLayout_ParseBeyondYear9999(t *testing.T) {
	l := snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimeBits: 50, WorkerBits: 1, SequenceBits: 12}
	if _, err := l.Parse(9223372036854775807); !errors.Is(err, snowflake.ErrInvalidID) {
		t.Fatalf("Parse(max int64) in %s = %v, want ErrInvalidID", l.Bits(), err)
	}
	// The last millisecond of year 9999 still decodes.
	last := time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
	id := (last.UnixMilli()-l.EpochMillis())<<13 | 1<<12 | 5
	p, err := l.Parse(id)
	if err != nil || !p.Time.Equal(last) || p.Worker != 1 || p.Sequence != 5 {
		t.Fatalf("Parse(%d) = %+v, %v, want %v worker 1 sequence 5", id, p, err, last)
	}
	if _, err := p.Time.MarshalJSON(); err != nil {
		t.Fatalf("the decoded time does not encode: %v", err)
	}
	if _, err := l.Parse(id + 1<<13); !errors.Is(err, snowflake.ErrInvalidID) {
		t.Fatalf("Parse of the first millisecond of year 10000 = %v, want ErrInvalidID", err)
	}
}
