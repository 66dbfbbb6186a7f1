package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// errUsage is returned after a usage error was said; main exits 2 without
// more.
var errUsage = errors.New("usage")

// errHelp is returned by parseFlags for -h or --help: the dispatcher prints
// the usage on stdout and succeeds.
var errHelp = errors.New("help")

func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// run is the whole program; main only wires it to the process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, args, stdout, stderr)
}

// parseFlags parses args, then fills every flag not given on the command
// line from its IDMINT_* environment variable. Positional arguments may come
// before, between or after flags; they are returned in order. A flag the
// command line gets wrong is a usageError.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, usageError{err.Error()}
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
		// The first of the flag's variables that is set wins.
		for _, name := range flagEnvs(f) {
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
				return
			}
		}
	})
	return positional, err
}

// envVars is a flag's value read from environment variables of its own
// rather than the one its name gives: --token is a different token to
// different commands, and one IDMINT_TOKEN for all of them let a token
// meant for one reach another. names[0] is the documented variable; the
// others are older names still read, deprecated.
type envVars struct {
	flag.Value
	names []string
}

// renameEnv makes the flag name of fs read the variables names instead of
// IDMINT_ + its name.
func renameEnv(fs *flag.FlagSet, name string, names ...string) {
	f := fs.Lookup(name)
	f.Value = &envVars{Value: f.Value, names: names}
}

// flagEnvs lists the variables that set f, the documented one first.
func flagEnvs(f *flag.Flag) []string {
	if v, ok := f.Value.(*envVars); ok {
		return v.names
	}
	return []string{envName(f.Name)}
}

// envDoc names f's variable for --help and docs/cli.md, with the older
// names it still reads.
func envDoc(f *flag.Flag, quote string) string {
	names := flagEnvs(f)
	s := quote + names[0] + quote
	if len(names) > 1 {
		s += " (or " + quote + strings.Join(names[1:], quote+", "+quote) + quote + ", deprecated)"
	}
	return s
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

// version is the module version this binary was built as.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// versionFlags is `idmint version`: the module version, the VCS revision
// it was built from (and whether the tree had changes), and the Go version.
func versionFlags(*flag.FlagSet) runFunc {
	return func(_ context.Context, out output, _ []string) error {
		fmt.Fprint(out.stdout, versionText(debug.ReadBuildInfo()))
		return nil
	}
}

func versionText(bi *debug.BuildInfo, ok bool) string {
	v, rev, modified, goVersion := "(devel)", "unknown", "", runtime.Version()
	if ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				modified = " (modified)"
			}
		}
	}
	return fmt.Sprintf("idmint %s\nrevision %s%s\n%s\n", v, rev, modified, goVersion)
}
