package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
)

// adminTarget is where the tag commands act: the database, or a running
// instance's admin API.
type adminTarget struct {
	store         storeConfig
	server, token string
	tls           tlsClientFlags
}

func (a *adminTarget) register(fs *flag.FlagSet) {
	a.store.register(fs)
	fs.StringVar(&a.server, "server", "", "base URL of a running instance whose admin API to use instead of the database")
	fs.StringVar(&a.token, "token", "", "bearer token with the admin scope, for --server")
	renameEnv(fs, "token", "IDMINT_ADMIN_TOKEN", "IDMINT_TOKEN")
	a.tls.register(fs)
}

// open returns the admin interface chosen and a func that closes it, and
// says on stderr which it is.
func (a *adminTarget) open(ctx context.Context, stderr io.Writer) (allocator.Admin, func(), error) {
	c, store, err := a.connect(ctx, stderr)
	switch {
	case err != nil:
		return nil, nil, err
	case c != nil:
		return c, func() {}, nil
	}
	return store.admin, store.close, nil
}

// connect returns the client of the admin API with --server, else the
// store opened (to be closed by the caller), and says on stderr which.
func (a *adminTarget) connect(ctx context.Context, stderr io.Writer) (*adminClient, *openedStore, error) {
	if a.server != "" {
		hc, err := a.tls.httpClient(30 * time.Second)
		if err != nil {
			return nil, nil, err
		}
		c, err := newAdminClient(a.server, a.token, hc)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(stderr, "idmint: admin API of %s\n", redact(a.server))
		return c, nil, nil
	}
	store, err := openForCommand(ctx, a.store, stderr)
	return nil, store, err
}

// tagFlags registers the target flags and returns a run that opens the
// target, calls do and prints the tags it returns.
func tagFlags(fs *flag.FlagSet, do func(ctx context.Context, admin allocator.Admin, args []string) ([]allocator.Tag, error)) runFunc {
	var target adminTarget
	target.register(fs)
	return func(ctx context.Context, out output, args []string) error {
		admin, closeAdmin, err := target.open(ctx, out.stderr)
		if err != nil {
			return err
		}
		defer closeAdmin()
		tags, err := do(ctx, admin, args)
		if tags != nil {
			printTags(out.stdout, tags)
		}
		return err
	}
}

func tagCreateFlags(fs *flag.FlagSet) runFunc {
	var spec allocator.TagSpec
	fs.Int64Var(&spec.Step, "step", allocator.DefaultStep, "minimum segment size, at least 1")
	fs.Int64Var(&spec.MaxStep, "max-step", 0, "maximum segment size (0: 1,000,000)")
	fs.Int64Var(&spec.Start, "start", 1, "first ID to hand out (at most 2^63-step: one segment must fit below 2^63-1)")
	fs.StringVar(&spec.Description, "description", "", "what the tag is for")
	fs.DurationVar(&spec.Runway, "runway", 0, "how long the buffers must carry the tag's callers without the database, at the peak rate (0: the instance's --runway)")
	run := tagFlags(fs, func(ctx context.Context, admin allocator.Admin, args []string) ([]allocator.Tag, error) {
		spec.Name = args[0]
		t, err := admin.CreateTag(ctx, spec)
		if err != nil {
			return nil, err
		}
		return []allocator.Tag{t}, nil
	})
	return func(ctx context.Context, out output, args []string) error {
		// The stores take step 0 for the default: given on the command
		// line, it is a mistake, not a wish for 1000.
		if spec.Step < 1 {
			return fmt.Errorf("--step %d: want at least 1 (leave --step out for the default %d)", spec.Step, allocator.DefaultStep)
		}
		return run(ctx, out, args)
	}
}

func tagListFlags(fs *flag.FlagSet) runFunc {
	return tagFlags(fs, func(ctx context.Context, admin allocator.Admin, _ []string) ([]allocator.Tag, error) {
		tags, err := admin.Tags(ctx)
		if err == nil && tags == nil {
			tags = []allocator.Tag{}
		}
		return tags, err
	})
}

func tagSetStepFlags(fs *flag.FlagSet) runFunc {
	var maxStep int64
	fs.Int64Var(&maxStep, "max-step", 0, "maximum segment size (0: 1,000,000)")
	return tagFlags(fs, func(ctx context.Context, admin allocator.Admin, args []string) ([]allocator.Tag, error) {
		step, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("step %q: not a whole number", truncateArg(args[1]))
		}
		t, err := admin.SetStep(ctx, args[0], step, maxStep)
		if err != nil {
			return nil, err
		}
		return []allocator.Tag{t}, nil
	})
}

func tagUpdateFlags(fs *flag.FlagSet) runFunc {
	var runway time.Duration
	fs.DurationVar(&runway, "runway", 0, "how long the buffers must carry the tag's callers without the database, at the peak rate (0: the instance's --runway)")
	return tagFlags(fs, func(ctx context.Context, admin allocator.Admin, args []string) ([]allocator.Tag, error) {
		t, err := admin.SetRunway(ctx, args[0], runway)
		if err != nil {
			return nil, err
		}
		return []allocator.Tag{t}, nil
	})
}

func tagBumpFlags(fs *flag.FlagSet) runFunc {
	var to, by int64
	fs.Int64Var(&to, "to", 0, "raise max_id to at least N")
	fs.Int64Var(&by, "by", 0, "raise max_id by N")
	return tagFlags(fs, func(ctx context.Context, admin allocator.Admin, args []string) ([]allocator.Tag, error) {
		t, err := admin.Bump(ctx, args[0], to, by)
		if errors.Is(err, allocator.ErrNotRaised) {
			return []allocator.Tag{t}, fmt.Errorf("%w: nothing changed (bump never lowers max_id)", err)
		}
		if err != nil {
			return nil, err
		}
		return []allocator.Tag{t}, nil
	})
}

func tagDescribeFlags(fs *flag.FlagSet) runFunc {
	return tagFlags(fs, func(ctx context.Context, admin allocator.Admin, args []string) ([]allocator.Tag, error) {
		t, err := admin.Describe(ctx, args[0], args[1])
		if err != nil {
			return nil, err
		}
		return []allocator.Tag{t}, nil
	})
}

// printTags prints tags as a table. MAX_STEP is the effective bound: a tag
// without one shows the default, marked as such.
func printTags(w io.Writer, tags []allocator.Tag) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BIZ_TAG\tMAX_ID\tSTEP\tMAX_STEP\tRUNWAY\tDESCRIPTION")
	for _, t := range tags {
		maxStep := fmt.Sprintf("%d (default)", segment.DefaultMaxStep)
		if t.MaxStep > 0 {
			maxStep = strconv.FormatInt(t.MaxStep, 10)
		}
		runway := "(instance)"
		if t.Runway > 0 {
			runway = t.Runway.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", t.Name, t.MaxID, t.Step, maxStep, runway, t.Description)
	}
	tw.Flush()
}
