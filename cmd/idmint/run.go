package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// errUsage is returned after usage was printed; main exits 2 without more.
var errUsage = errors.New("usage")

// errHelp is returned by parseFlags after -h or --help printed the usage:
// run turns it into success.
var errHelp = errors.New("help")

func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `idmint hands out unique 64-bit IDs per business tag, backed by PostgreSQL
or, with no --database-url, by a SQLite file on this machine (--data-dir).

Usage:
  idmint serve [flags]                   run the HTTP service
  idmint migrate [flags]                 apply database migrations
  idmint tag create NAME [--step N] [--max-step N] [--start N] [--description S]
  idmint tag list
  idmint tag set-step NAME STEP [--max-step N]
  idmint tag bump NAME (--to N | --by N)  raise max_id after a database restore
                                         (tag commands work on the database, or on a
                                         running instance with --server URL --token T)
  idmint token create --name NAME --scope SCOPE [--scope SCOPE …]
                                         make a bearer token (printed once)
  idmint token list
  idmint token revoke ID
  idmint standby list | forget NAME      the standbys that hold new segments back (PostgreSQL)
  idmint healthcheck [--listen ADDR] [--healthcheck-url URL]
                                         exit 0 if /id/health answers 200
  idmint drill --target URL [--target URL …] [--biz-tag T | --snowflake] [--duration D] [--concurrency N]
                                         ask instances for IDs, check none repeats
  idmint snowflake parse ID [--snowflake-bits B] [--snowflake-epoch T]
                                         decode a snowflake id: time, worker id, sequence
  idmint version

Every flag has an environment equivalent: --database-url is IDMINT_DATABASE_URL,
--listen is IDMINT_LISTEN, and so on. Run "idmint COMMAND -h" for its flags.
`

// run is the whole program; main only wires it to the process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, stdout, stderr)
	if errors.Is(err, errHelp) {
		return nil // the usage asked for is printed
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr)
	case "tag":
		return runTag(ctx, rest, stdout, stderr)
	case "token":
		return runToken(ctx, rest, stdout, stderr)
	case "standby":
		return runStandby(ctx, rest, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, rest, stdout, stderr)
	case "drill":
		return runDrill(ctx, rest, stdout, stderr)
	case "snowflake":
		return runSnowflake(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "idmint", version())
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "idmint: unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

// parseFlags parses args, then fills every flag not given on the command
// line from its IDMINT_* environment variable. Positional arguments may come
// before, between or after flags; they are returned in order.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if _, both := os.LookupEnv(name + "_FILE"); both {
				err = fmt.Errorf("%s and %s_FILE are both set: use one", name, name)
			} else if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
			return
		}
		if path, ok := os.LookupEnv(name + "_FILE"); ok {
			err = setFromFile(fs, f.Name, name+"_FILE", path)
		}
	})
	return positional, err
}

// setFromFile sets a flag to the contents of the file at path, less its
// trailing newline: IDMINT_DATABASE_URL_FILE=/run/secrets/db as Docker and
// Kubernetes secrets are mounted, so that a password is never in the
// environment. The contents are never echoed in an error.
func setFromFile(fs *flag.FlagSet, flagName, env, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", env, err)
	}
	if err := fs.Set(flagName, strings.TrimRight(string(b), "\r\n")); err != nil {
		return fmt.Errorf("%s: the contents of %s are not a valid --%s", env, path, flagName)
	}
	return nil
}

// parseNoArgs is parseFlags for a command that takes no positional
// argument: a stray one is a usage error, not silently ignored.
func parseNoArgs(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "idmint %s: unexpected argument %q\n\n", fs.Name(), truncateArg(pos[0]))
		fs.Usage()
		return errUsage
	}
	return nil
}

// truncateArg keeps an echoed argument short.
func truncateArg(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func envName(flagName string) string {
	return "IDMINT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet returns a flag set whose usage names its environment variables.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nFlags (environment variable in brackets; its _FILE form reads the value from a file):\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(stderr, "  --%s [%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
		})
	}
	return fs
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
