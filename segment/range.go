package segment

// Range is an inclusive range of IDs.
type Range struct {
	First, Last int64
}

// Len returns the number of IDs in r.
func (r Range) Len() int64 { return r.Last - r.First + 1 }
