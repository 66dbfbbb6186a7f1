package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// sampleSize bounds the examples a report keeps of each kind of anomaly.
const sampleSize = 10

// Checker records requests and the IDs acknowledged to them. It is safe for
// concurrent use.
type Checker struct {
	mu        sync.Mutex // protects every field below
	attempted int64
	acked     int64
	failed    int64
	errors    map[string]int64 // failure message → count
	ids       map[string][]int64
	last      map[clientTag]int64 // last ID each client saw per tag
	order     []OrderViolation
	orderN    int64
}

type clientTag struct{ client, tag string }

// OrderViolation is an ID a client was acknowledged that is not above the
// ID it was acknowledged just before, for the same tag.
type OrderViolation struct {
	Client, Tag string
	Prev, ID    int64
}

// New returns an empty Checker.
func New() *Checker {
	return &Checker{
		errors: map[string]int64{},
		ids:    map[string][]int64{},
		last:   map[clientTag]int64{},
	}
}

// Attempt records a request about to be made.
func (c *Checker) Attempt() {
	c.mu.Lock()
	c.attempted++
	c.mu.Unlock()
}

// Fail records an attempted request that got no ID. Its outcome is unknown
// to the checker: an ID may have been taken for it and lost.
func (c *Checker) Fail(err error) {
	msg := "unknown error"
	if err != nil {
		msg = err.Error()
	}
	c.mu.Lock()
	c.failed++
	if len(c.errors) < 100 || c.errors[msg] > 0 {
		c.errors[msg]++
	}
	c.mu.Unlock()
}

// Ack records the IDs acknowledged to client for tag by one request, in
// the order they were handed out.
func (c *Checker) Ack(client, tag string, ids ...int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked++
	c.ids[tag] = append(c.ids[tag], ids...)
	key := clientTag{client, tag}
	for _, id := range ids {
		if prev, ok := c.last[key]; ok && id <= prev {
			c.orderN++
			if len(c.order) < sampleSize {
				c.order = append(c.order, OrderViolation{Client: client, Tag: tag, Prev: prev, ID: id})
			}
		}
		c.last[key] = id
	}
}

// Each calls fn with every ID acknowledged for tag, in no set order.
func (c *Checker) Each(tag string, fn func(id int64)) {
	c.mu.Lock()
	ids := slices.Clone(c.ids[tag])
	c.mu.Unlock()
	for _, id := range ids {
		fn(id)
	}
}

// Report is what a Checker found.
type Report struct {
	// Attempted, Acknowledged and Failed count requests. Attempted minus
	// Acknowledged minus Failed are requests still in flight.
	Attempted, Acknowledged, Failed int64
	// Errors counts failed requests by message.
	Errors map[string]int64
	Tags   []TagReport
	// OrderViolations counts IDs not above the one the same client saw
	// before for the tag; OrderSample shows the first few.
	OrderViolations int64
	OrderSample     []OrderViolation
}

// TagReport is what a Checker found for one tag.
type TagReport struct {
	Tag string
	// IDs counts acknowledged IDs, Distinct the different ones among them.
	IDs, Distinct int64
	// Duplicates counts IDs acknowledged more than once (each extra time
	// counts); DuplicateSample shows the first few such IDs.
	Duplicates      int64
	DuplicateSample []int64
	Lowest, Highest int64
	// Missing counts the IDs between Lowest and Highest never acknowledged,
	// in Gaps runs; LargestGap is the longest run.
	Missing, Gaps, LargestGap int64
}

// Valid reports whether no ID was acknowledged twice and every client saw
// increasing IDs.
func (r Report) Valid() bool {
	return r.Duplicates() == 0 && r.OrderViolations == 0
}

// Duplicates returns the duplicates over every tag.
func (r Report) Duplicates() int64 {
	var n int64
	for _, t := range r.Tags {
		n += t.Duplicates
	}
	return n
}

// IDs returns the acknowledged IDs over every tag.
func (r Report) IDs() int64 {
	var n int64
	for _, t := range r.Tags {
		n += t.IDs
	}
	return n
}

// Tag returns the report of one tag, zero if it saw no ID.
func (r Report) Tag(tag string) TagReport {
	for _, t := range r.Tags {
		if t.Tag == tag {
			return t
		}
	}
	return TagReport{Tag: tag}
}

// Report analyses what was recorded so far.
func (c *Checker) Report() Report {
	c.mu.Lock()
	r := Report{
		Attempted:       c.attempted,
		Acknowledged:    c.acked,
		Failed:          c.failed,
		Errors:          make(map[string]int64, len(c.errors)),
		OrderViolations: c.orderN,
		OrderSample:     slices.Clone(c.order),
	}
	for msg, n := range c.errors {
		r.Errors[msg] = n
	}
	ids := make(map[string][]int64, len(c.ids))
	for tag, list := range c.ids {
		ids[tag] = slices.Clone(list)
	}
	c.mu.Unlock()

	for tag, list := range ids {
		r.Tags = append(r.Tags, analyse(tag, list))
	}
	sort.Slice(r.Tags, func(i, j int) bool { return r.Tags[i].Tag < r.Tags[j].Tag })
	return r
}

// analyse sorts ids (its own copy) and finds duplicates and holes.
func analyse(tag string, ids []int64) TagReport {
	t := TagReport{Tag: tag, IDs: int64(len(ids))}
	if len(ids) == 0 {
		return t
	}
	slices.Sort(ids)
	t.Lowest, t.Highest = ids[0], ids[len(ids)-1]
	t.Distinct = 1
	for i := 1; i < len(ids); i++ {
		switch d := ids[i] - ids[i-1]; {
		case d == 0:
			t.Duplicates++
			if len(t.DuplicateSample) < sampleSize && (len(t.DuplicateSample) == 0 || t.DuplicateSample[len(t.DuplicateSample)-1] != ids[i]) {
				t.DuplicateSample = append(t.DuplicateSample, ids[i])
			}
		case d > 1:
			t.Distinct++
			t.Gaps++
			t.Missing += d - 1
			t.LargestGap = max(t.LargestGap, d-1)
		default:
			t.Distinct++
		}
	}
	return t
}

// String formats the report for people, one fact per line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests: %d attempted, %d acknowledged, %d failed, %d unfinished\n",
		r.Attempted, r.Acknowledged, r.Failed, r.Attempted-r.Acknowledged-r.Failed)
	for _, t := range r.Tags {
		fmt.Fprintf(&b, "biz_tag %s: %d ids acknowledged, %d distinct, %d duplicates",
			t.Tag, t.IDs, t.Distinct, t.Duplicates)
		if len(t.DuplicateSample) > 0 {
			fmt.Fprintf(&b, " (e.g. %v)", t.DuplicateSample)
		}
		fmt.Fprintf(&b, "; lowest %d, highest %d; %d missing in %d gaps (largest %d)\n",
			t.Lowest, t.Highest, t.Missing, t.Gaps, t.LargestGap)
	}
	fmt.Fprintf(&b, "order violations: %d", r.OrderViolations)
	for _, v := range r.OrderSample {
		fmt.Fprintf(&b, "; client %s biz_tag %s got %d after %d", v.Client, v.Tag, v.ID, v.Prev)
	}
	b.WriteByte('\n')
	msgs := make([]string, 0, len(r.Errors))
	for msg := range r.Errors {
		msgs = append(msgs, msg)
	}
	sort.Slice(msgs, func(i, j int) bool { return r.Errors[msgs[i]] > r.Errors[msgs[j]] })
	for i, msg := range msgs {
		if i == 5 {
			fmt.Fprintf(&b, "errors: … %d more kinds\n", len(msgs)-i)
			break
		}
		fmt.Fprintf(&b, "errors: %d× %s\n", r.Errors[msg], msg)
	}
	verdict := "valid: no duplicates, no order violations"
	if !r.Valid() {
		verdict = "INVALID: duplicates or order violations found"
	}
	b.WriteString(verdict + "\n")
	return b.String()
}
