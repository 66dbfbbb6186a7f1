package checker_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idmint/idmint/internal/checker"
)

func TestChecker_Report(t *testing.T) {
	tests := []struct {
		name  string
		run   func(c *checker.Checker)
		check func(t *testing.T, r checker.Report)
	}{
		{
			name: "unique increasing ids are valid",
			run: func(c *checker.Checker) {
				for id := int64(1); id <= 10; id++ {
					c.Attempt()
					c.Ack("a", "order", id)
				}
			},
			check: func(t *testing.T, r checker.Report) {
				tr := r.Tag("order")
				if !r.Valid() || r.Acknowledged != 10 || tr.IDs != 10 || tr.Distinct != 10 ||
					tr.Lowest != 1 || tr.Highest != 10 || tr.Missing != 0 || tr.Gaps != 0 {
					t.Fatalf("report %+v", r)
				}
			},
		},
		{
			name: "catches duplicates across clients",
			run: func(c *checker.Checker) {
				c.Ack("a", "order", 1, 2, 3)
				c.Ack("b", "order", 3, 4)
				c.Ack("c", "order", 3)
			},
			check: func(t *testing.T, r checker.Report) {
				tr := r.Tag("order")
				if r.Valid() || tr.Duplicates != 2 || tr.Distinct != 4 || len(tr.DuplicateSample) != 1 || tr.DuplicateSample[0] != 3 {
					t.Fatalf("report %+v", tr)
				}
				if !strings.Contains(r.String(), "INVALID") {
					t.Fatalf("String does not say INVALID:\n%s", r)
				}
			},
		},
		{
			name: "the same id under two tags is no duplicate",
			run: func(c *checker.Checker) {
				c.Ack("a", "order", 1)
				c.Ack("a", "user", 1)
			},
			check: func(t *testing.T, r checker.Report) {
				if !r.Valid() || len(r.Tags) != 2 {
					t.Fatalf("report %+v", r)
				}
			},
		},
		{
			name: "catches order violations per client and tag",
			run: func(c *checker.Checker) {
				c.Ack("a", "order", 5)
				c.Ack("b", "order", 1) // another client: fine
				c.Ack("a", "order", 4) // a went back
				c.Ack("a", "order", 6, 6+1, 6)
			},
			check: func(t *testing.T, r checker.Report) {
				if r.Valid() || r.OrderViolations != 2 {
					t.Fatalf("order violations %d, valid %v", r.OrderViolations, r.Valid())
				}
				if v := r.OrderSample[0]; v.Client != "a" || v.Prev != 5 || v.ID != 4 {
					t.Fatalf("first violation %+v", v)
				}
			},
		},
		{
			name: "counts gaps and failures",
			run: func(c *checker.Checker) {
				for range 5 {
					c.Attempt()
				}
				c.Ack("a", "order", 1, 2)
				c.Ack("a", "order", 5)
				c.Ack("a", "order", 10)
				c.Fail(errors.New("503 unavailable"))
			},
			check: func(t *testing.T, r checker.Report) {
				tr := r.Tag("order")
				if !r.Valid() || tr.Missing != 6 || tr.Gaps != 2 || tr.LargestGap != 4 ||
					r.Attempted != 5 || r.Acknowledged != 3 || r.Failed != 1 || r.Errors["503 unavailable"] != 1 {
					t.Fatalf("report %+v, tag %+v", r, tr)
				}
				if !strings.Contains(r.String(), "1 unfinished") {
					t.Fatalf("String:\n%s", r)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := checker.New()
			tt.run(c)
			tt.check(t, c.Report())
		})
	}
}

func TestChecker_Concurrent(t *testing.T) {
	c := checker.New()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				c.Attempt()
				c.Ack(fmt.Sprint("w", w), "order", int64(i*8+w+1))
			}
		})
	}
	// The same id from two clients at once must still be caught.
	wg.Go(func() { c.Ack("x", "order", 42) })
	wg.Wait()
	r := c.Report()
	tr := r.Tag("order")
	if tr.IDs != 8001 || tr.Duplicates != 1 || tr.DuplicateSample[0] != 42 || r.OrderViolations != 0 {
		t.Fatalf("report %+v", tr)
	}
}

func ExampleChecker() {
	c := checker.New()
	for _, id := range []int64{1, 2, 4, 4} {
		c.Attempt()
		c.Ack("client-1", "order", id)
	}
	r := c.Report()
	fmt.Println(r.Tag("order").Duplicates, r.OrderViolations, r.Valid())
	// Output: 1 1 false
}
