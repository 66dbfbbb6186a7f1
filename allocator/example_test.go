package allocator_test

import (
	"context"
	"fmt"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
)

// An allocator embedded in a program. memstore.Store keeps IDs unique within this
// process; use postgres.Open for IDs unique across processes.
func Example() {
	ctx := context.Background()
	store := memstore.New()
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100, Start: 1000}); err != nil {
		panic(err)
	}
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	defer a.Close(ctx)

	id, _ := a.Next(ctx, "order")
	ids, _ := a.NextN(ctx, "order", 3)
	_, err := a.Next(ctx, "invoice")
	fmt.Println(id, ids)
	fmt.Println(err)
	// Output:
	// 1000 [1001 1002 1003]
	// unknown biz_tag: "invoice"
}
