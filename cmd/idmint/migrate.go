package main

import (
	"context"
	"fmt"
	"io"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "idmint migrate [flags]", stderr)
	var sc storeConfig
	sc.register(fs)
	var lc logConfig
	lc.register(fs)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	logger, err := lc.logger(stderr)
	if err != nil {
		return err
	}
	store, err := openStore(ctx, sc, true, logger)
	if err != nil {
		return err
	}
	defer store.close()
	fmt.Fprintf(stdout, "applied %d migration(s); schema version %d\n", len(store.applied), store.version)
	return nil
}
