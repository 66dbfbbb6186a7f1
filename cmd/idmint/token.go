package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idmint/idmint/token"
)

// scopeList is a flag that may be repeated or comma-separated.
type scopeList []string

func (l *scopeList) String() string { return strings.Join(*l, ",") }

func (l *scopeList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// tokenFlags registers the store flags and returns a run that opens the
// store (saying which on stderr) and calls do.
func tokenFlags(fs *flag.FlagSet, do func(ctx context.Context, tokens token.Store, out output, args []string) error) runFunc {
	return storeFlags(fs, func(ctx context.Context, store *openedStore, out output, args []string) error {
		return do(ctx, store.tokens, out, args)
	})
}

func tokenCreateFlags(fs *flag.FlagSet) runFunc {
	var (
		name   string
		scopes scopeList
		rate   float64
	)
	fs.StringVar(&name, "name", "", "who or what the token is for (required)")
	fs.Var(&scopes, "scope", "admin, monitor, ids, ids:TAG or ids:PREFIX* (repeat or comma-separate; required)")
	fs.Float64Var(&rate, "rate", 0, "IDs per second this token may take (0: serve's --ids-per-second-per-token)")
	var tok token.Token
	var bearer string
	run := tokenFlags(fs, func(ctx context.Context, tokens token.Store, out output, _ []string) error {
		created, err := tokens.CreateToken(ctx, tok)
		if err != nil {
			return err
		}
		fmt.Fprintf(out.stderr, "token %s (%s) created with scopes %s; it is shown once, keep it now:\n", created.ID, created.Name, strings.Join(created.Scopes, " "))
		fmt.Fprintln(out.stdout, bearer)
		return nil
	})
	return func(ctx context.Context, out output, args []string) error {
		// Check before touching the database.
		var err error
		if tok, bearer, err = token.New(name, scopes); err != nil {
			return err
		}
		if err := token.ValidateRate(rate); err != nil {
			return err
		}
		tok.IDsPerSecond = rate
		return run(ctx, out, args)
	}
}

func tokenListFlags(fs *flag.FlagSet) runFunc {
	return tokenFlags(fs, func(ctx context.Context, tokens token.Store, out output, _ []string) error {
		list, err := tokens.ListTokens(ctx)
		if err != nil {
			return err
		}
		printTokens(out.stdout, list)
		return nil
	})
}

func tokenRevokeFlags(fs *flag.FlagSet) runFunc {
	return tokenFlags(fs, func(ctx context.Context, tokens token.Store, out output, args []string) error {
		t, err := tokens.RevokeToken(ctx, args[0])
		if err != nil {
			return err
		}
		printTokens(out.stdout, []token.Token{t})
		return nil
	})
}

func printTokens(w io.Writer, tokens []token.Token) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tRATE\tCREATED\tREVOKED")
	for _, t := range tokens {
		revoked := "-"
		if t.RevokedAt != nil {
			revoked = t.RevokedAt.UTC().Format(time.RFC3339)
		}
		rate := "-" // the instance's bound
		if t.IDsPerSecond > 0 {
			rate = strconv.FormatFloat(t.IDsPerSecond, 'g', -1, 64) + "/s"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(t.Scopes, ","), rate, t.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	tw.Flush()
}
