package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"

	"github.com/idmint/idmint/allocator"
)

const tagUsage = `Usage:
  idmint tag create NAME [--step N] [--max-step N] [--start N] [--description S]
  idmint tag list
  idmint tag set-step NAME STEP [--max-step N]
  idmint tag bump NAME (--to N | --by N)
  idmint tag describe NAME TEXT

Every tag command works on the database (--database-url, --data-dir), or on
a running instance's admin API with --server URL --token T (IDMINT_SERVER,
IDMINT_TOKEN; a token with the admin scope). bump never lowers max_id: asked
to, it changes nothing and exits 1.
`

func runTag(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tagUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "--help" || sub == "help" {
		fmt.Fprint(stdout, tagUsage)
		return nil
	}
	fs := newFlagSet("tag "+sub, "idmint tag "+sub+" …", stderr)
	var sc storeConfig
	sc.register(fs)
	var server, token string
	fs.StringVar(&server, "server", "", "base URL of a running instance whose admin API to use instead of the database")
	fs.StringVar(&token, "token", "", "bearer token with the admin scope, for --server")
	var (
		spec     allocator.TagSpec
		to, by   int64
		wantArgs int
	)
	switch sub {
	case "create":
		fs.Int64Var(&spec.Step, "step", 1000, "minimum segment size")
		fs.Int64Var(&spec.MaxStep, "max-step", 0, "maximum segment size (0: 1,000,000)")
		fs.Int64Var(&spec.Start, "start", 1, "first ID to hand out (at most 2^63-step: one segment must fit below 2^63-1)")
		fs.StringVar(&spec.Description, "description", "", "what the tag is for")
		wantArgs = 1
	case "list":
	case "set-step":
		fs.Int64Var(&spec.MaxStep, "max-step", 0, "maximum segment size (0: 1,000,000)")
		wantArgs = 2
	case "bump":
		fs.Int64Var(&to, "to", 0, "raise max_id to at least N")
		fs.Int64Var(&by, "by", 0, "raise max_id by N")
		wantArgs = 1
	case "describe":
		wantArgs = 2
	default:
		fmt.Fprintf(stderr, "idmint tag: unknown subcommand %q\n\n%s", truncateArg(sub), tagUsage)
		return errUsage
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != wantArgs {
		fmt.Fprint(stderr, tagUsage)
		return errUsage
	}
	var admin allocator.Admin
	if server != "" {
		if admin, err = newAdminClient(server, token); err != nil {
			return err
		}
	} else {
		// Logs would only clutter the table; errors still say what failed.
		store, err := openStore(ctx, sc, false, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		defer store.close()
		admin = store.admin
	}

	var tags []allocator.Tag
	switch sub {
	case "create":
		spec.Name = pos[0]
		t, err := admin.CreateTag(ctx, spec)
		if err != nil {
			return err
		}
		tags = []allocator.Tag{t}
	case "list":
		if tags, err = admin.Tags(ctx); err != nil {
			return err
		}
	case "set-step":
		step, err := strconv.ParseInt(pos[1], 10, 64)
		if err != nil {
			return fmt.Errorf("step %q: not a whole number", pos[1])
		}
		t, err := admin.SetStep(ctx, pos[0], step, spec.MaxStep)
		if err != nil {
			return err
		}
		tags = []allocator.Tag{t}
	case "bump":
		t, err := admin.Bump(ctx, pos[0], to, by)
		if errors.Is(err, allocator.ErrNotRaised) {
			printTags(stdout, []allocator.Tag{t})
			return fmt.Errorf("%w: nothing changed (bump never lowers max_id)", err)
		}
		if err != nil {
			return err
		}
		tags = []allocator.Tag{t}
	case "describe":
		t, err := admin.Describe(ctx, pos[0], pos[1])
		if err != nil {
			return err
		}
		tags = []allocator.Tag{t}
	}
	printTags(stdout, tags)
	return nil
}

func printTags(w io.Writer, tags []allocator.Tag) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BIZ_TAG\tMAX_ID\tSTEP\tMAX_STEP\tDESCRIPTION")
	for _, t := range tags {
		maxStep := "-"
		if t.MaxStep > 0 {
			maxStep = strconv.FormatInt(t.MaxStep, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", t.Name, t.MaxID, t.Step, maxStep, t.Description)
	}
	tw.Flush()
}
