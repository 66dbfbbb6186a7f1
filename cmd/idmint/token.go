package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idmint/idmint/allocator"
)

const tokenUsage = `Usage:
  idmint token create --name NAME --scope SCOPE [--scope SCOPE …] [--rate IDS_PER_SECOND]
  idmint token list
  idmint token revoke ID

Scopes: admin (the /v1 admin API), monitor (/metrics, /id/health and
/id/dashboard under --protect-monitoring), ids (IDs of every tag), ids:TAG
(IDs of one tag), ids:PREFIX* (IDs of the tags starting with PREFIX).
--rate bounds the IDs the token may take per second (/ids counts its count),
above or below serve's --ids-per-second-per-token, which bounds the tokens
made without it. The token is printed once; only its hash is stored. Give it to the caller as
"Authorization: Bearer idm_…". A revoked token stops working within a second.
`

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

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, tokenUsage)
		return nil
	case "create", "list", "revoke":
	default:
		fmt.Fprintf(stderr, "idmint token: unknown subcommand %q\n\n%s", truncateArg(sub), tokenUsage)
		return errUsage
	}
	fs := newFlagSet("token "+sub, "idmint token "+sub+" …", stderr)
	var sc storeConfig
	sc.register(fs)
	var (
		name   string
		scopes scopeList
		rate   float64
	)
	want := 0
	switch sub {
	case "create":
		fs.StringVar(&name, "name", "", "who or what the token is for (required)")
		fs.Var(&scopes, "scope", "admin, monitor, ids, ids:TAG or ids:PREFIX* (repeat or comma-separate; required)")
		fs.Float64Var(&rate, "rate", 0, "IDs per second this token may take (0: serve's --ids-per-second-per-token)")
	case "revoke":
		want = 1
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != want {
		fmt.Fprint(stderr, tokenUsage)
		return errUsage
	}
	var tok allocator.Token
	var bearer string
	if sub == "create" {
		// Check before touching the database.
		if tok, bearer, err = allocator.NewToken(name, scopes); err != nil {
			return err
		}
		if err := allocator.ValidateTokenRate(rate); err != nil {
			return err
		}
		tok.IDsPerSecond = rate
	}
	store, err := openStore(ctx, sc, false, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer store.close()
	switch sub {
	case "create":
		if tok, err = store.tokens.CreateToken(ctx, tok); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "token %s (%s) created with scopes %s; it is shown once, keep it now:\n", tok.ID, tok.Name, strings.Join(tok.Scopes, " "))
		fmt.Fprintln(stdout, bearer)
	case "list":
		tokens, err := store.tokens.ListTokens(ctx)
		if err != nil {
			return err
		}
		printTokens(stdout, tokens)
	case "revoke":
		t, err := store.tokens.RevokeToken(ctx, pos[0])
		if err != nil {
			return err
		}
		printTokens(stdout, []allocator.Token{t})
	}
	return nil
}

func printTokens(w io.Writer, tokens []allocator.Token) {
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
