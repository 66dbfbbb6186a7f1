package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
)

// quiet discards logs.

// exampleServer starts an idmint instance in this process over store.
func exampleServer(store allocator.Store) (url string, stop func()) {
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
	return srv.URL, func() {
		srv.Close()
		a.Close(context.Background())
	}
}

// A client serves IDs from ranges an instance grants it: after the first
// range, Next is an atomic add in this process. Close gives back the unused
// tail, so the next range starts where this client stopped.
func Example() {
	ctx := context.Background()
	store := memstore.New()
	store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100})
	url, stop := exampleServer(store)
	defer stop()

	c, err := client.New(ctx, client.Config{URLs: []string{url}, Logger: testlog.Discard()})
	if err != nil {
		panic(err)
	}
	id, _ := c.Next(ctx, "order")
	ids, _ := c.NextN(ctx, "order", 3)
	fmt.Println(id, ids)
	if err := c.Close(ctx); err != nil {
		panic(err)
	}

	tags, _ := store.Tags(ctx)
	fmt.Println("max_id after close:", tags[0].MaxID)
	// Output:
	// 1 [2 3 4]
	// max_id after close: 4
}

// Two instances behind one client: when the one that answered last fails,
// the same request goes to the next, so no range is granted twice.
func ExampleConfig_failover() {
	ctx := context.Background()
	store := memstore.New()
	store.CreateTag(ctx, allocator.TagSpec{Name: "user", Step: 10, MaxStep: 10})
	first, stopFirst := exampleServer(store)
	second, stopSecond := exampleServer(store)
	defer stopSecond()

	c, err := client.New(ctx, client.Config{URLs: []string{first, second}, Tags: []string{"user"}, Logger: testlog.Discard()})
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	stopFirst() // the instance that granted the first range goes away

	ids, err := c.NextN(ctx, "user", 25)
	fmt.Println(ids[0], ids[24], err)
	// Output:
	// 1 25 <nil>
}

// An unknown tag is an error that says so.
func ExampleClient_Next_unknownTag() {
	ctx := context.Background()
	url, stop := exampleServer(memstore.New())
	defer stop()
	c, _ := client.New(ctx, client.Config{URLs: []string{url}, Logger: testlog.Discard()})
	defer c.Close(ctx)

	_, err := c.Next(ctx, "invoice")
	fmt.Println(err)
	// Output:
	// unknown biz_tag: "invoice"
}
