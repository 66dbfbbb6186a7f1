package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSentinels_BornOnce: a sentinel name means one value in the whole
// tree. Where several packages declare ErrX, every declaration but one is
// another package's value (allocator.ErrClosed = wire.ErrClosed), never a
// second errors.New or wire.NewError: two values of one name are how a
// check of one package's error misses the other's.
func TestSentinels_BornOnce(t *testing.T) {
	born := map[string][]string{}    // name → packages that make a value of it
	aliased := map[string][]string{} // name → packages that name another's
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "gen", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.Dir(path)
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Err") || i >= len(vs.Values) {
						continue
					}
					if _, ok := vs.Values[i].(*ast.SelectorExpr); ok {
						aliased[name.Name] = append(aliased[name.Name], pkg)
					} else {
						born[name.Name] = append(born[name.Name], pkg)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(born) < 20 {
		t.Fatalf("found only %d sentinels: the walk missed the tree", len(born))
	}
	for name, pkgs := range born {
		if len(pkgs) > 1 {
			slices.Sort(pkgs)
			t.Errorf("%s is born in %d packages (%s): one must name the other's value", name, len(pkgs), strings.Join(pkgs, ", "))
		}
	}
	if len(aliased["ErrClosed"]) < 3 {
		t.Errorf("ErrClosed is named by %v: want segment, allocator and snowflake to name wire's", aliased["ErrClosed"])
	}
}
