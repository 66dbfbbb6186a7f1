package segment

import "unsafe"

// Index finds a tag's buffer without a lock. It is immutable: its owner
// replaces it (never modifies it) behind an atomic pointer, so that every
// ID taken for a known tag costs a lookup here and an atomic add, nothing
// else. A few tags are kept in an array and found by comparing names,
// which costs less than hashing; more are found in a map.
type Index struct {
	byTag map[string]*Buffer
	n     int // entries used in few; -1 when byTag is searched instead
	few   [indexFew]indexEntry
	// The padding makes an Index 256 bytes, a size the Go allocator
	// aligns to 256: it then has cache lines of its own, which no hot
	// counter of another object (a span's next ID) shares and keeps
	// invalidating.
	_ [256 - 16 - indexFew*24]byte
}

type indexEntry struct {
	tag string
	buf *Buffer
}

// indexFew is the largest number of tags an Index keeps in its array.
const indexFew = 8

// NewIndex returns an Index of byTag, which it keeps: the caller must not
// modify byTag afterwards. A nil map makes an empty Index.
func NewIndex(byTag map[string]*Buffer) *Index {
	if byTag == nil {
		byTag = map[string]*Buffer{}
	}
	x := &Index{byTag: byTag, n: -1}
	if len(byTag) <= indexFew {
		x.n = 0
		for tag, b := range byTag {
			x.few[x.n] = indexEntry{tag, b}
			x.n++
		}
	}
	return x
}

// Find returns tag's buffer, nil when x has none or x is nil. It is small
// enough to be inlined into the caller's fast path.
func (x *Index) Find(tag string) *Buffer {
	if x == nil {
		return nil
	}
	if x.n < 0 {
		return x.byTag[tag]
	}
	for i := range x.n {
		if sameString(x.few[i].tag, tag) {
			return x.few[i].buf
		}
	}
	return nil
}

// Len returns the number of tags in x (0 for nil).
func (x *Index) Len() int {
	if x == nil {
		return 0
	}
	return len(x.byTag)
}

// Buffers returns the map x was made of, for reading only.
func (x *Index) Buffers() map[string]*Buffer {
	if x == nil {
		return nil
	}
	return x.byTag
}

// sameString is a == b, without the call that compares bytes when both
// share them, as a caller passing the same string every time does.
func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}
