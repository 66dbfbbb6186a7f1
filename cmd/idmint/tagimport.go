package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/leafexport"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire/tagname"
)

const tagImportDetail = `FILE is an export of Leaf's leaf_alloc table (- reads stdin): CSV or TSV,
with a header (biz_tag, max_id, step, description; any order) or without one
in the table's column order, or a SQL dump's INSERT INTO leaf_alloc rows.
Every ID Leaf handed out is at most its max_id, so each tag is created with
max_id = Leaf's max_id + --margin (its first ID above it), or, if it exists,
raised to at least that (never lowered). Leaf's step becomes the tag's step.
Stop Leaf's segment fetches before the export, or give --margin room for the
segments Leaf grants after it. The whole file is checked before anything
changes; a run can be repeated (tags already high enough are left alone).
--dry-run prints the plan and changes nothing. See docs/from-leaf.md.`

// leafPlan is what tag import does to one tag.
type leafPlan struct {
	row    leafexport.Row
	floor  int64 // the max_id the tag must have: Leaf's plus the margin
	exists bool
	maxID  int64 // the tag's max_id now (exists) or after
	action string
}

func tagImportFlags(fs *flag.FlagSet) runFunc {
	var target adminTarget
	target.register(fs)
	var margin int64
	var dryRun bool
	fs.Int64Var(&margin, "margin", 0, "IDs to leave unused above each Leaf max_id (room for segments Leaf grants after the export)")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would change, change nothing")
	return func(ctx context.Context, out output, args []string) error {
		rows, err := readLeafExport(args[0])
		if err != nil {
			return err
		}
		if margin < 0 {
			return fmt.Errorf("--margin %d: want at least 0", margin)
		}
		admin, closeAdmin, err := target.open(ctx, out.stderr)
		if err != nil {
			return err
		}
		defer closeAdmin()
		plans, err := planLeafImport(ctx, admin, rows, margin)
		if err != nil {
			return err
		}
		if !dryRun {
			err = applyLeafImport(ctx, admin, plans)
		}
		printLeafPlans(out.stdout, plans, dryRun)
		return err
	}
}

func readLeafExport(path string) ([]leafexport.Row, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	rows, err := leafexport.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// planLeafImport checks every row against idmint's rules and the tags that
// exist, before anything changes.
func planLeafImport(ctx context.Context, admin allocator.Admin, rows []leafexport.Row, margin int64) ([]leafPlan, error) {
	tags, err := admin.Tags(ctx)
	if err != nil {
		return nil, err
	}
	existing := make(map[string]allocator.Tag, len(tags))
	for _, t := range tags {
		existing[t.Name] = t
	}
	plans := make([]leafPlan, 0, len(rows))
	for _, row := range rows {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("line %d: biz_tag %q: %s; nothing changed", row.Line, tagname.Truncate(row.Tag, 64), fmt.Sprintf(format, args...))
		}
		if !tagname.Valid(row.Tag) {
			return nil, bad("not an idmint tag name (1 to 64 of A-Z a-z 0-9 _ . : -, starting with a letter or digit)")
		}
		if row.MaxID > math.MaxInt64-margin {
			return nil, bad("max_id %d + --margin %d passes 2^63-1", row.MaxID, margin)
		}
		p := leafPlan{row: row, floor: row.MaxID + margin}
		if t, ok := existing[row.Tag]; ok {
			p.exists, p.maxID = true, t.MaxID
			if _, err := allocator.Bumped(t, p.floor, 0); errors.Is(err, allocator.ErrNotRaised) {
				p.action = "unchanged"
			} else if err != nil {
				return nil, bad("%v", err)
			} else {
				p.action, p.maxID = "raise", p.floor
			}
		} else {
			spec, err := leafSpec(p).WithDefaults()
			if err != nil {
				return nil, bad("%v", err)
			}
			p.action, p.maxID = "create", spec.Start-1
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// leafSpec is the tag a Leaf row becomes: its first ID above Leaf's max_id
// (and the margin), Leaf's step as the smallest segment, and a max step
// that lets Leaf's step through when it is above idmint's default.
func leafSpec(p leafPlan) allocator.TagSpec {
	spec := allocator.TagSpec{Name: p.row.Tag, Step: p.row.Step, Start: p.floor + 1, Description: p.row.Description}
	if p.row.Step > segment.DefaultMaxStep {
		spec.MaxStep = p.row.Step
	}
	return spec
}

// applyLeafImport carries the plans out in order. A tag created meanwhile
// by someone else is raised instead; an error stops the run, and a second
// run takes up where it stopped.
func applyLeafImport(ctx context.Context, admin allocator.Admin, plans []leafPlan) error {
	for i := range plans {
		if err := applyLeafPlan(ctx, admin, &plans[i]); err != nil {
			for j := i; j < len(plans); j++ {
				if plans[j].action != "unchanged" {
					plans[j].action = "not done"
				}
			}
			return err
		}
	}
	return nil
}

// applyLeafPlan creates or raises one tag.
func applyLeafPlan(ctx context.Context, admin allocator.Admin, p *leafPlan) error {
	switch p.action {
	case "unchanged":
		return nil
	case "create":
		t, err := admin.CreateTag(ctx, leafSpec(*p))
		switch {
		case errors.Is(err, allocator.ErrExists):
			// Created meanwhile: raise it instead.
		case err != nil:
			return fmt.Errorf("create %s: %w", p.row.Tag, err)
		default:
			p.action, p.maxID = "created", t.MaxID
			return nil
		}
	}
	t, err := admin.Bump(ctx, p.row.Tag, p.floor, 0)
	switch {
	case errors.Is(err, allocator.ErrNotRaised):
		p.action, p.maxID = "unchanged", t.MaxID
	case err != nil:
		return fmt.Errorf("raise %s: %w", p.row.Tag, err)
	default:
		p.action, p.maxID = "raised", t.MaxID
	}
	return nil
}

func printLeafPlans(w io.Writer, plans []leafPlan, dryRun bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BIZ_TAG\tLEAF_MAX_ID\tSTEP\tACTION\tMAX_ID")
	for _, p := range plans {
		action := p.action
		if dryRun && action != "unchanged" {
			action = "would " + action
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\n", p.row.Tag, p.row.MaxID, p.row.Step, action, p.maxID)
	}
	tw.Flush()
}
