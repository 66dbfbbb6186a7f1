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

// tokenAdmin is where the token commands act: the store, or a running
// instance's admin API (adminClient).
type tokenAdmin interface {
	// createToken makes a token and returns it with its bearer string.
	createToken(ctx context.Context, name string, scopes []string, rate float64) (token.Token, string, error)
	ListTokens(ctx context.Context) ([]token.Token, error)
	RevokeToken(ctx context.Context, id string) (token.Token, error)
}

// storeTokens is tokenAdmin on the store: the secret is made here.
type storeTokens struct{ token.Store }

func (s storeTokens) createToken(ctx context.Context, name string, scopes []string, rate float64) (token.Token, string, error) {
	tok, bearer, err := token.New(name, scopes)
	if err != nil {
		return token.Token{}, "", err
	}
	tok.IDsPerSecond = rate
	tok, err = s.CreateToken(ctx, tok)
	return tok, bearer, err
}

// tokenFlags registers the target flags and returns a run that opens the
// target (saying which on stderr) and calls do.
func tokenFlags(fs *flag.FlagSet, do func(ctx context.Context, tokens tokenAdmin, out output, args []string) error) runFunc {
	var target adminTarget
	target.register(fs)
	return func(ctx context.Context, out output, args []string) error {
		client, store, err := target.connect(ctx, out.stderr)
		if err != nil {
			return err
		}
		if client != nil {
			return do(ctx, client, out, args)
		}
		defer store.close()
		return do(ctx, storeTokens{store.tokens}, out, args)
	}
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
	run := tokenFlags(fs, func(ctx context.Context, tokens tokenAdmin, out output, _ []string) error {
		created, bearer, err := tokens.createToken(ctx, name, scopes, rate)
		if err != nil {
			return err
		}
		fmt.Fprintf(out.stderr, "token %s (%s) created with scopes %s; it is shown once, keep it now:\n", created.ID, created.Name, strings.Join(created.Scopes, " "))
		fmt.Fprintln(out.stdout, bearer)
		return nil
	})
	return func(ctx context.Context, out output, args []string) error {
		// Check before touching the database or the server.
		if err := token.Validate(name, scopes); err != nil {
			return err
		}
		if err := token.ValidateRate(rate); err != nil {
			return err
		}
		return run(ctx, out, args)
	}
}

func tokenListFlags(fs *flag.FlagSet) runFunc {
	return tokenFlags(fs, func(ctx context.Context, tokens tokenAdmin, out output, _ []string) error {
		list, err := tokens.ListTokens(ctx)
		if err != nil {
			return err
		}
		printTokens(out.stdout, list)
		return nil
	})
}

func tokenRevokeFlags(fs *flag.FlagSet) runFunc {
	return tokenFlags(fs, func(ctx context.Context, tokens tokenAdmin, out output, args []string) error {
		id := args[0]
		if tid, _, ok := token.Parse(id); ok {
			// Only the ID goes on: a secret has no place in a URL or a
			// log line.
			fmt.Fprintf(out.stderr, "idmint: a whole token given: revoking its ID %s\n", tid)
			id = tid
		}
		t, err := tokens.RevokeToken(ctx, id)
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
