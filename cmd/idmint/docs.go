package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// writeDocs writes docs/cli.md from the command table: TestCLI_Docs fails
// when the file in the repository is not what this writes.
func writeDocs(w io.Writer) {
	fmt.Fprint(w, "# idmint command line\n\n")
	fmt.Fprint(w, "<!-- Generated from the command table in cmd/idmint/commands.go: edit it, then run\n"+
		"     IDMINT_UPDATE_DOCS=1 go test ./cmd/idmint -run TestCLI_Docs -->\n\n")
	fmt.Fprintf(w, "%s\n\n%s\n\n", oneLine(intro), oneLine(envNote))
	fmt.Fprint(w, "Every command's `--help` (or `idmint help COMMAND`) prints its usage on stdout and exits 0; "+
		"a usage error (a missing or unexpected argument, an unknown flag) says what was wrong on stderr and exits 2.\n\n")
	fmt.Fprint(w, "| command | |\n|---|---|\n")
	for _, c := range commands {
		fmt.Fprintf(w, "| [`%s`](#%s) | %s |\n", cell(strings.TrimSuffix(c.line(), " [flags]")), anchor(c.name), cell(c.synopsis))
	}
	for _, g := range groups {
		if g.detail == "" {
			continue
		}
		fmt.Fprintf(w, "\n## idmint %s\n\n%s\n", g.name, oneLine(g.detail))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "\n## idmint %s\n\n```\n%s\n```\n\n%s.\n", c.name, c.line(), upperFirst(c.synopsis))
		if c.detail != "" {
			fmt.Fprintf(w, "\n%s\n", oneLine(c.detail))
		}
		fs, _ := c.flagSet()
		if !hasFlags(fs) {
			continue
		}
		fmt.Fprint(w, "\n| flag | environment | default | |\n|---|---|---|---|\n")
		fs.VisitAll(func(f *flag.Flag) {
			usage, def := flagDefault(f)
			switch {
			case usage != f.Usage:
				// A default said in words, not a value to type.
			case f.DefValue != "":
				def = "`" + f.DefValue + "`"
			default:
				def = "–"
			}
			fmt.Fprintf(w, "| `--%s` | %s | %s | %s |\n", f.Name, envDoc(f, "`"), cell(def), cell(usage))
		})
	}
}

// anchor is the heading anchor GitHub makes for "idmint NAME".
func anchor(name string) string {
	return "idmint-" + strings.ReplaceAll(name, " ", "-")
}

// cell escapes s for a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// oneLine joins the lines of a paragraph written for a terminal.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
