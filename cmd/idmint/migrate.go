package main

import (
	"context"
	"flag"
	"fmt"
)

// migrateFlags is `idmint migrate`.
func migrateFlags(fs *flag.FlagSet) runFunc {
	var sc storeConfig
	sc.register(fs)
	var lc logConfig
	lc.register(fs)
	return func(ctx context.Context, out output, _ []string) error {
		logger, err := lc.logger(out.stderr)
		if err != nil {
			return err
		}
		store, err := openStore(ctx, sc, true, logger, func(msg string) { logger.Warn(msg) })
		if err != nil {
			return err
		}
		defer store.close()
		fmt.Fprintf(out.stdout, "applied %d migration(s); schema version %d\n", len(store.applied), store.version)
		return nil
	}
}
