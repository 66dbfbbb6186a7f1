// Package scripts holds the tests of the repository's shell scripts.
package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckTracked runs check-tracked.sh (make lint's first check) on
// scratch repositories, each tracking one file beside a README: build
// output is refused, naming the file, and what belongs in the tree passes.
func TestCheckTracked(t *testing.T) {
	for _, tool := range []string{"git", "bash", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("check-tracked.sh needs %s: %v", tool, err)
		}
	}
	script, err := filepath.Abs("check-tracked.sh")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("a line of text\n"), 1<<20/15+1) // just over 1 MiB
	for _, c := range []struct {
		name string
		path string
		data []byte
		mode os.FileMode
		want string // in the output when refused; "" passes
	}{
		{"text", "docs/notes.md", []byte("# notes\n"), 0o644, ""},
		{"script", "scripts/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755, ""},
		{"ELF", "idmint", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...), 0o755, "tracked executable binary: idmint"},
		{"ELF without the executable bit", "cmd/idmint/idmint", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...), 0o644, "tracked executable binary: cmd/idmint/idmint"},
		{"Mach-O", "bin/tool", append([]byte{0xcf, 0xfa, 0xed, 0xfe}, make([]byte, 100)...), 0o755, "tracked executable binary: bin/tool"},
		{"executable not text", "tools/blob", []byte("#!/bin/sh\n\x00\x00\x01binary"), 0o755, "tracked executable file that is not text: tools/blob"},
		{"data not executable", "testdata/seed.bin", []byte("\x00\x01\x02"), 0o644, ""},
		{"over 1 MiB", "docs/big.txt", big, 0o644, "tracked file larger than 1 MiB: docs/big.txt"},
		{"over 1 MiB, named", "docs/dashboard.png", big, 0o644, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			git := func(args ...string) {
				t.Helper()
				cmd := exec.Command("git", args...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			}
			git("init", "-q")
			write(t, filepath.Join(dir, "README.md"), []byte("# scratch\n"), 0o644)
			write(t, filepath.Join(dir, c.path), c.data, c.mode)
			git("add", "-f", "README.md", c.path)

			cmd := exec.Command("bash", script)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("check-tracked.sh refused %s: %v\n%s", c.path, err, out)
			case c.want != "" && err == nil:
				t.Fatalf("check-tracked.sh passed a tree tracking %s; want %q\n%s", c.path, c.want, out)
			case c.want != "" && !strings.Contains(string(out), c.want):
				t.Fatalf("check-tracked.sh said %q; want %q", out, c.want)
			}
		})
	}
}

func write(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestGitignoreCoversBuilds: `go build` of each main package of the
// workspace writes its binary at the root (run there) or beside its
// source (run in its directory), and .gitignore covers both, so that no
// git add -A tracks one.
func TestGitignoreCoversBuilds(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	list := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.Dir}}{{end}}`, "./...", "./wire/...", "./segment/...", "./client/...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var paths []string
	for dir := range strings.FieldsSeq(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(dir)
		paths = append(paths, name, filepath.ToSlash(filepath.Join(rel, name)))
	}
	if len(paths) < 4 {
		t.Fatalf("go list found %d main packages; want cmd/idmint and cmd/idmint-bench at least", len(paths)/2)
	}
	// The root's .gitignore in a scratch repository: the tree tested may
	// be a copy without .git (scripts/mutate.sh).
	ignore, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	write(t, filepath.Join(scratch, ".gitignore"), ignore, 0o644)
	if out, err := exec.Command("git", "-C", scratch, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	for _, p := range paths {
		// --no-index: whether a new file there would be ignored, tracked
		// or not.
		check := exec.Command("git", "check-ignore", "-q", "--no-index", p)
		check.Dir = scratch
		if err := check.Run(); err != nil {
			t.Errorf(".gitignore does not cover %s, a binary go build writes: %v", p, err)
		}
	}
}
