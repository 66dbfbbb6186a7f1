package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/idmint/idmint/allocator"
)

const standbyUsage = `Usage:
  idmint standby list
  idmint standby forget NAME

Standbys idmint saw streaming from the primary are remembered (PostgreSQL
only): one that disconnects still holds new segments back, since it could
be promoted without them, until it is back and has caught up, its slot is
dropped, a failover starts a new timeline, or an operator forgets it here
(it counts again once seen streaming). Forget only a standby that is gone
for good and can never be promoted. Both commands work on the database
(--database-url); the admin API has GET /v1/standbys and
DELETE /v1/standbys/{name}.
`

func runStandby(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, standbyUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "--help" || sub == "help" {
		fmt.Fprint(stdout, standbyUsage)
		return nil
	}
	want := map[string]int{"list": 0, "forget": 1}
	n, ok := want[sub]
	if !ok {
		fmt.Fprintf(stderr, "idmint standby: unknown subcommand %q\n\n%s", truncateArg(sub), standbyUsage)
		return errUsage
	}
	fs := newFlagSet("standby "+sub, "idmint standby "+sub+" …", stderr)
	var sc storeConfig
	sc.register(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != n {
		fmt.Fprint(stderr, standbyUsage)
		return errUsage
	}
	store, err := openStore(ctx, sc, false, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer store.close()
	pg, ok := store.store.(*allocator.Postgres)
	if !ok {
		return errors.New("idmint standby: only PostgreSQL has standbys (--database-url postgres://…)")
	}
	if sub == "forget" {
		if err := pg.ForgetStandby(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "standby %s forgotten: it no longer holds new segments back until it is seen streaming again\n", pos[0])
		return nil
	}
	recs, err := pg.Standbys(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSLOT\tTIMELINE\tLAST_SEEN\tLAST_FLUSH\tFORGOTTEN")
	for _, s := range recs {
		forgotten := "-"
		if s.ForgottenAt != nil {
			forgotten = s.ForgottenAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%s\t%s\n", s.Name, s.Slot, s.Timeline, s.LastSeen.UTC().Format(time.RFC3339), s.LastFlushLSN, forgotten)
	}
	return tw.Flush()
}
