package snowflake_test

import (
	"context"
	"fmt"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
)

func ExampleLayout_Parse() {
	l := snowflake.DefaultLayout() // 41/10/12 since 2025-01-01
	p, err := l.Parse(4214791)     // 1<<22 | 5<<12 | 7
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Time, "worker", p.Worker, "sequence", p.Sequence)
	// Output: 2025-01-01 00:00:00.001 +0000 UTC worker 5 sequence 7
}

func ExampleStart() {
	ctx := context.Background()
	// In production the store is lease.NewPostgres(pool) or
	// lease.NewSQLite(db): the database idmint already uses.
	node, err := snowflake.Start(ctx, snowflake.Config{
		Layout: snowflake.DefaultLayout(),
		Store:  lease.NewMemory(nil),
		Holder: "host-1234",
		Logger: testlog.Discard(),
	})
	if err != nil {
		panic(err)
	}
	defer node.Close(ctx) // releases the worker ID
	a, _ := node.Next(ctx)
	b, _ := node.Next(ctx)
	p, _ := node.Layout().Parse(b)
	fmt.Println("increasing:", b > a, "worker:", p.Worker, "epoch:", node.Stats().Epoch)
	// Output: increasing: true worker: 0 epoch: 1
}
