// Command idmint serves unique 64-bit IDs per business tag from PostgreSQL,
// or, given no database URL, from a SQLite file in the data directory
// (single-machine mode, with a demo tag on first start).
//
//	idmint serve                      # SQLite in ~/.local/share/idmint
//	idmint serve --database-url postgres://… [--migrate]
//	idmint migrate --database-url postgres://…
//	idmint tag create order --step 1000
//	idmint tag list
//	idmint tag set-step order 5000
//	idmint tag bump order --to 1000000
//	idmint help [COMMAND]             every command, or one's flags
//
// The commands are one table (commands.go): dispatch, --help, usage errors
// and docs/cli.md all come from it.
//
// Every flag can also be set by an IDMINT_* environment variable: --listen is
// IDMINT_LISTEN, --database-url is IDMINT_DATABASE_URL. A flag given on the
// command line wins.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if err != errUsage {
			fmt.Fprintln(os.Stderr, "idmint:", err)
		}
		os.Exit(exitCode(err))
	}
}
