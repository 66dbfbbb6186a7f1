package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
)

// command is one idmint command. The table of them, commands, is the whole
// command line: dispatch, usage, --help, `idmint help` and docs/cli.md all
// come from it, so that none of them can forget a command.
type command struct {
	name     string   // "serve", "tag create"
	args     []string // its positional arguments, all required: "NAME"
	synopsis string   // what it does, one line
	detail   string   // more, for --help and docs/cli.md
	// flags registers the command's flags on fs and returns its run, bound
	// to their values; nil for a command without flags.
	flags func(fs *flag.FlagSet) runFunc
}

// runFunc runs a command once its flags are parsed, with exactly as many
// positional arguments as the command names.
type runFunc func(ctx context.Context, out output, args []string) error

// output is where a command writes: results on stdout, everything else
// (logs, errors, which database was used) on stderr.
type output struct{ stdout, stderr io.Writer }

// usageError is a mistake on the command line; the dispatcher says it on
// stderr with a pointer to the command's --help, and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// group is the first word of several commands ("tag"), with what they share.
type group struct {
	name   string
	detail string
}

var groups = []group{
	{"tag", `Every tag command works on the database (--database-url, --data-dir), or on
a running instance's admin API with --server URL --token T (IDMINT_SERVER,
IDMINT_ADMIN_TOKEN; a token with the admin scope), over https:// with --ca, and
--cert and --key for a server that asks for client certificates. It says on
stderr which one it used.`},
	{"token", `Scopes: admin (the /v1 admin API), monitor (/metrics, /id/health and
/id/dashboard under --protect-monitoring), ids (IDs of every tag), ids:TAG
(IDs of one tag), ids:PREFIX* (IDs of the tags starting with PREFIX). The
token is printed once; only its hash is stored. Give it to the caller as
"Authorization: Bearer idm_…". A revoked token stops working within a second
(within serve's --token-max-stale while the database cannot be read; at once
on the instance that revoked it with --server). Every token command works on
the database, or with --server URL --token T on a running instance's admin
API (an admin token; TLS as for tag), and says on stderr which it used.`},
	{"standby", `Standbys idmint saw streaming from the primary are remembered (PostgreSQL
only): one that disconnects still holds new segments back, since it could
be promoted without them, until it is back and has caught up, its slot is
dropped, a failover starts a new timeline, or an operator forgets it here
(it counts again once seen streaming). The admin API has GET /v1/standbys
and DELETE /v1/standbys/{name}.`},
	{"snowflake", ""},
}

// commands is every command, in the order usage lists them.
var commands = []command{
	{name: "serve", synopsis: "run the HTTP service", detail: serveDetail, flags: serveFlags},
	{name: "migrate", synopsis: "apply database migrations", flags: migrateFlags},
	{name: "tag create", args: []string{"NAME"}, synopsis: "create a tag",
		detail: fmt.Sprintf("--step is at least 1; leave it out for the default %d.", allocator.DefaultStep),
		flags:  tagCreateFlags},
	{name: "tag list", synopsis: "list the tags",
		detail: fmt.Sprintf(`MAX_STEP is the effective largest segment: a tag without one set shows
"%d (default)". The admin API shows such a tag's max_step as 0.`, segment.DefaultMaxStep),
		flags: tagListFlags},
	{name: "tag set-step", args: []string{"NAME", "STEP"}, synopsis: "change a tag's step (and max step); each instance uses it at its next fetch",
		flags: tagSetStepFlags},
	{name: "tag bump", args: []string{"NAME"}, synopsis: "raise a tag's max_id (--to N or --by N) after a database restore",
		detail: "bump never lowers max_id: asked to, it changes nothing and exits 1. --to and --by refuse values that leave no room for one segment below 2^63-1.",
		flags:  tagBumpFlags},
	{name: "tag describe", args: []string{"NAME", "TEXT"}, synopsis: "set a tag's description", flags: tagDescribeFlags},
	{name: "tag update", args: []string{"NAME"}, synopsis: "change a tag's runway (--runway); each instance uses it at its next fetch",
		detail: `--runway is how long the instances' buffers must carry the tag's callers
without the database, at the recent peak rate (see "Runway" in
docs/operations.md); 0 leaves the instance's --runway. At most 24h, within
the tag's max_step.`,
		flags: tagUpdateFlags},
	{name: "tag import", args: []string{"FILE"}, synopsis: "create or raise tags from a Leaf leaf_alloc export, above every ID Leaf handed out",
		detail: tagImportDetail, flags: tagImportFlags},
	{name: "token create", synopsis: "make a bearer token (printed once)",
		detail: "--rate bounds the IDs the token may take per second (/ids counts its count), above or below serve's --ids-per-second-per-token, which bounds the tokens made without it.",
		flags:  tokenCreateFlags},
	{name: "token list", synopsis: "list the tokens", flags: tokenListFlags},
	{name: "token revoke", args: []string{"ID"}, synopsis: "revoke a token", flags: tokenRevokeFlags},
	{name: "standby list", synopsis: "the standbys that hold new segments back (PostgreSQL)", flags: standbyListFlags},
	{name: "standby forget", args: []string{"NAME"}, synopsis: "stop waiting for a standby that is gone for good",
		detail: "Forget only a standby that is gone for good and can never be promoted.",
		flags:  standbyForgetFlags},
	{name: "snowflake parse", args: []string{"ID"}, synopsis: "decode a Snowflake ID: time, worker ID, sequence", flags: snowflakeParseFlags},
	{name: "drill", synopsis: "ask running instances for IDs, check none repeats",
		detail: "Inject faults meanwhile (kill an instance, restart the database); the drill fails (exit 1) if any ID came back twice or none came back.",
		flags:  drillFlags},
	{name: "healthcheck", synopsis: "exit 0 if /id/health answers 200 (a container health check)",
		detail: "It finds the instance where serve listens: --listen (IDMINT_LISTEN), as serve reads it, unless --healthcheck-url names the endpoint.",
		flags:  healthcheckFlags},
	{name: "dev-certs", synopsis: "write a CA, a server and a client certificate to try TLS and mTLS on this machine", detail: devCertsDetail, flags: devCertsFlags},
	{name: "version", synopsis: "print the version, VCS revision and Go version", flags: versionFlags},
}

const intro = `idmint hands out unique 64-bit IDs per business tag, backed by PostgreSQL
or, with no --database-url, by a SQLite file on this machine (--data-dir).`

const serveDetail = `Traces (OpenTelemetry, off by default) follow the standard OTEL_* environment:
OTEL_TRACES_EXPORTER=otlp (or an endpoint set) turns them on, none or
OTEL_SDK_DISABLED=true off; OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names the collector,
OTEL_EXPORTER_OTLP_PROTOCOL or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL picks
http/protobuf (the default) or grpc, OTEL_SERVICE_NAME (default idmint) and
OTEL_RESOURCE_ATTRIBUTES describe the instance, OTEL_TRACES_SAMPLER and
OTEL_TRACES_SAMPLER_ARG sample (default parentbased_always_on), and the
exporters' own OTEL_EXPORTER_OTLP_* and OTEL_BSP_* variables apply
(docs/tracing.md).`

const envNote = `Every flag has an environment variable: --database-url is IDMINT_DATABASE_URL,
--listen is IDMINT_LISTEN, and so on (IDMINT_ + the flag in upper case, - as _);
a flag on the command line wins. Each variable also has a _FILE form that
reads the value from a file, less its trailing newline (setting both is an
error). --token is the exception: IDMINT_ADMIN_TOKEN for the tag and token
commands, IDMINT_DRILL_TOKEN for drill, IDMINT_HEALTHCHECK_TOKEN for
healthcheck (IDMINT_TOKEN, which all three read before, still works).`

// lookupCommand returns the command named name, or nil.
func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// lookupGroup returns the group named name, or nil.
func lookupGroup(name string) *group {
	for i := range groups {
		if groups[i].name == name {
			return &groups[i]
		}
	}
	return nil
}

// members returns the commands of group g.
func (g *group) members() []*command {
	var cs []*command
	for i := range commands {
		if strings.HasPrefix(commands[i].name, g.name+" ") {
			cs = append(cs, &commands[i])
		}
	}
	return cs
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// dispatch finds the command args name and runs it.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return errUsage
	}
	if args[0] == "help" {
		return help(args[1:], stdout, stderr)
	}
	if isHelp(args[0]) {
		printUsage(stdout)
		return nil
	}
	if g := lookupGroup(args[0]); g != nil {
		switch {
		case len(args) == 1:
			return usageFail(stderr, g.name, fmt.Sprintf("missing command: one of %s", g.names()))
		case isHelp(args[1]):
			g.usage(stdout)
			return nil
		}
		c := lookupCommand(g.name + " " + args[1])
		if c == nil {
			return usageFail(stderr, g.name, fmt.Sprintf("unknown command %q: want one of %s", truncateArg(args[1]), g.names()))
		}
		return c.execute(ctx, args[2:], stdout, stderr)
	}
	c := lookupCommand(args[0])
	if c == nil {
		return usageFail(stderr, "", fmt.Sprintf("unknown command %q", truncateArg(args[0])))
	}
	return c.execute(ctx, args[1:], stdout, stderr)
}

// help is `idmint help [COMMAND]`: the usage asked for, on stdout.
func help(args []string, stdout, stderr io.Writer) error {
	name := strings.Join(args, " ")
	switch c, g := lookupCommand(name), lookupGroup(name); {
	case name == "":
		printUsage(stdout)
	case c != nil:
		c.usage(stdout)
	case g != nil:
		g.usage(stdout)
	default:
		return usageFail(stderr, "help", fmt.Sprintf("unknown command %q", truncateArg(name)))
	}
	return nil
}

// usageFail says what was wrong on the command line and where to read more.
func usageFail(stderr io.Writer, name, msg string) error {
	prefix, more := "idmint", "idmint --help"
	if name != "" {
		prefix, more = "idmint "+name, "idmint "+name+" --help"
	}
	fmt.Fprintf(stderr, "%s: %s\nRun '%s' for usage.\n", prefix, msg, more)
	return errUsage
}

func (g *group) names() string {
	var names []string
	for _, c := range g.members() {
		names = append(names, strings.TrimPrefix(c.name, g.name+" "))
	}
	return strings.Join(names, ", ")
}

// flagSet returns the command's flags, registered, and its run.
func (c *command) flagSet() (*flag.FlagSet, runFunc) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	// The dispatcher says every parse error, and --help goes to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	run := func(context.Context, output, []string) error { return nil }
	if c.flags != nil {
		run = c.flags(fs)
	}
	return fs, run
}

// execute parses args for c and runs it.
func (c *command) execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, run := c.flagSet()
	pos, err := parseFlags(fs, args)
	var ue usageError
	switch {
	case errors.Is(err, errHelp):
		c.usage(stdout)
		return nil
	case errors.As(err, &ue):
		return usageFail(stderr, c.name, ue.msg)
	case err != nil:
		return err
	case len(pos) < len(c.args):
		return usageFail(stderr, c.name, "missing "+c.args[len(pos)])
	case len(pos) > len(c.args):
		return usageFail(stderr, c.name, fmt.Sprintf("unexpected argument %q", truncateArg(pos[len(c.args)])))
	}
	err = run(ctx, output{stdout, stderr}, pos)
	if errors.As(err, &ue) {
		return usageFail(stderr, c.name, ue.msg)
	}
	return err
}

// line is the command's usage line: idmint tag create NAME [flags].
func (c *command) line() string {
	s := "idmint " + c.name
	if len(c.args) > 0 {
		s += " " + strings.Join(c.args, " ")
	}
	if c.flags != nil {
		s += " [flags]"
	}
	return s
}

// usage is the command's --help.
func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", c.line(), upperFirst(c.synopsis))
	if c.detail != "" {
		fmt.Fprintf(w, "\n%s\n", c.detail)
	}
	if g := lookupGroup(strings.Fields(c.name)[0]); g != nil && g.detail != "" {
		fmt.Fprintf(w, "\n%s\n", g.detail)
	}
	fs, _ := c.flagSet()
	if !hasFlags(fs) {
		return
	}
	fmt.Fprint(w, "\nFlags (environment variable in brackets; its _FILE form reads the value from a file):\n")
	fs.VisitAll(func(f *flag.Flag) {
		usage, def := flagDefault(f)
		if def != "" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "  --%s [%s]\n      %s\n", f.Name, envDoc(f, ""), usage)
	})
}

// flagDefault splits a flag's usage from its default as a reader should
// see it: the default the usage ends with in words, "(default ttl/6)", when
// the flag's zero value stands for something computed; else its value
// unless that is empty, false or zero.
func flagDefault(f *flag.Flag) (usage, def string) {
	if i := strings.LastIndex(f.Usage, " (default "); i >= 0 && strings.HasSuffix(f.Usage, ")") {
		return f.Usage[:i], f.Usage[i+len(" (default ") : len(f.Usage)-1]
	}
	switch f.DefValue {
	case "", "false", "0", "0s":
		return f.Usage, ""
	}
	return f.Usage, f.DefValue
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// usage is the group's --help: its commands and what they share.
func (g *group) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: idmint %s COMMAND [arguments] [flags]\n\nCommands:\n", g.name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range g.members() {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSuffix(c.line(), " [flags]"), c.synopsis)
	}
	tw.Flush()
	if g.detail != "" {
		fmt.Fprintf(w, "\n%s\n", g.detail)
	}
	fmt.Fprintf(w, "\nRun 'idmint %s COMMAND --help' for its flags.\n", g.name)
}

// printUsage is idmint's own usage: every command of the table.
func printUsage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage: idmint COMMAND [arguments] [flags]\n\nCommands:\n", intro)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSuffix(c.line(), " [flags]"), c.synopsis)
	}
	fmt.Fprintf(tw, "  idmint help [COMMAND]\t%s\n", "this text, or a command's")
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n\nRun 'idmint COMMAND --help' for its flags.\n", envNote)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// commandNames returns the first word of every command, once each, in
// table order: the names README.md lists.
func commandNames() []string {
	var names []string
	for _, c := range commands {
		if n := strings.Fields(c.name)[0]; !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}
