package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/idmint/idmint/allocator/postgres"
)

// standbyFlags registers the store flags and returns a run that opens the
// store, refuses anything but PostgreSQL, and calls do.
func standbyFlags(fs *flag.FlagSet, do func(ctx context.Context, pg *postgres.Store, out output, args []string) error) runFunc {
	return storeFlags(fs, func(ctx context.Context, store *openedStore, out output, args []string) error {
		pg, ok := store.store.(*postgres.Store)
		if !ok {
			return errors.New("idmint standby: only PostgreSQL has standbys (--database-url postgres://…)")
		}
		return do(ctx, pg, out, args)
	})
}

func standbyForgetFlags(fs *flag.FlagSet) runFunc {
	return standbyFlags(fs, func(ctx context.Context, pg *postgres.Store, out output, args []string) error {
		if err := pg.ForgetStandby(ctx, args[0]); err != nil {
			return err
		}
		fmt.Fprintf(out.stdout, "standby %s forgotten: it no longer holds new segments back until it is seen streaming again\n", args[0])
		return nil
	})
}

func standbyListFlags(fs *flag.FlagSet) runFunc {
	return standbyFlags(fs, func(ctx context.Context, pg *postgres.Store, out output, _ []string) error {
		recs, err := pg.Standbys(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSLOT\tTIMELINE\tLAST_SEEN\tLAST_FLUSH\tFORGOTTEN")
		for _, s := range recs {
			forgotten := "-"
			if s.ForgottenAt != nil {
				forgotten = s.ForgottenAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%s\t%s\n", s.Name, s.Slot, s.Timeline, s.LastSeen.UTC().Format(time.RFC3339), s.LastFlushLSN, forgotten)
		}
		return tw.Flush()
	})
}
