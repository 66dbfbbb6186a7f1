package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// policyCore is a core over a memory store with tag order, in mode, and
// the bearer of a token scoped ids:order; refused collects the codes of
// the refusals it counts.
func policyCore(t testing.TB, mode core.AuthMode) (c *core.Core, bearer string, refused *[]string) {
	t.Helper()
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := token.New("orders", []string{"ids:order"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := allocator.New(allocator.Config{Store: m, Logger: quiet, Instance: "test"})
	t.Cleanup(func() { a.Close(context.Background()) })
	refused = new([]string)
	c = core.New(core.Config{Allocator: a, Auth: core.AuthConfig{Tokens: m, IDs: mode}, Admin: m, TokenAdmin: m, Logger: quiet,
		OnRefused: func(code string) { *refused = append(*refused, code) }})
	return c, "Bearer " + secret, refused
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return core.Lookup(err).Code
}

// TestCore_AccessBeforeInput: in the token mode a caller without a token
// is refused whatever its input holds: the adapter's decoding error is
// answered only once access control passed, so that a refused caller
// learns nothing of its input's faults and costs no parsing (invariant 8).
func TestCore_AccessBeforeInput(t *testing.T) {
	c, bearer, _ := policyCore(t, core.AuthToken)
	ctx := context.Background()
	bad := core.NewError(wire.CodeInvalidCount, "count: not a number")
	anon, holder := core.NewCaller(nil, "10.0.0.1:1"), core.NewCaller([]string{bearer}, "10.0.0.1:1")
	for _, tc := range []struct {
		name string
		call func(core.Caller) error
	}{
		{"NextID", func(w core.Caller) error {
			_, err := c.NextID(ctx, w, core.IDsRequest{Tag: "order", Bad: bad})
			return err
		}},
		{"NextIDs", func(w core.Caller) error {
			_, err := c.NextIDs(ctx, w, core.IDsRequest{Tag: "order", Count: 3, Bad: bad}, nil)
			return err
		}},
		{"GrantRange", func(w core.Caller) error {
			_, err := c.GrantRange(ctx, w, core.GrantRequest{Bad: bad})
			return err
		}},
		{"GiveBack", func(w core.Caller) error {
			_, err := c.GiveBack(ctx, w, core.GiveBackRequest{Bad: bad})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := codeOf(tc.call(anon)); code != wire.CodeUnauthorized {
				t.Errorf("without a token: %s, want %s", code, wire.CodeUnauthorized)
			}
			if err := tc.call(holder); !errors.Is(err, bad) {
				t.Errorf("with a token: %v, want the decoding error", err)
			}
		})
	}
	// The admin operations alike: an ID token is refused before its body.
	if _, err := c.CreateTag(ctx, holder, wire.CreateTagRequest{}, bad); codeOf(err) != wire.CodeForbidden {
		t.Errorf("CreateTag with an ID token and a bad body: %v, want forbidden", err)
	}
}

// TestCore_Scopes: the token's scope covers its tags only, the ID
// operations need a token in the token mode and none in the open mode,
// and the admin operations need the admin scope in both.
func TestCore_Scopes(t *testing.T) {
	ctx := context.Background()
	t.Run("token", func(t *testing.T) {
		c, bearer, _ := policyCore(t, core.AuthToken)
		holder := core.NewCaller([]string{bearer}, "10.0.0.1:1")
		if _, err := c.NextID(ctx, holder, core.IDsRequest{Tag: "order"}); err != nil {
			t.Fatalf("own tag: %v", err)
		}
		if _, err := c.NextID(ctx, holder, core.IDsRequest{Tag: "user"}); codeOf(err) != wire.CodeForbidden {
			t.Fatalf("another tag: %v, want forbidden", err)
		}
		if _, err := c.NextID(ctx, core.NewCaller([]string{"Bearer idm_nope"}, ""), core.IDsRequest{Tag: "order"}); codeOf(err) != wire.CodeUnauthorized {
			t.Fatalf("a made-up token: %v, want unauthorized", err)
		}
		if err := c.Precheck(ctx, core.NewCaller(nil, ""), core.AccessIDs); codeOf(err) != wire.CodeUnauthorized {
			t.Fatalf("Precheck of the ID operations without a token: %v, want unauthorized", err)
		}
	})
	t.Run("open", func(t *testing.T) {
		c, bearer, _ := policyCore(t, core.AuthOpen)
		anon := core.NewCaller(nil, "10.0.0.1:1")
		if _, err := c.NextID(ctx, anon, core.IDsRequest{Tag: "order"}); err != nil {
			t.Fatalf("open mode without a token: %v", err)
		}
		if err := c.Precheck(ctx, anon, core.AccessIDs); err != nil {
			t.Fatalf("Precheck of the ID operations, open: %v", err)
		}
		if _, err := c.ListTags(ctx, anon); codeOf(err) != wire.CodeUnauthorized {
			t.Fatalf("ListTags without a token: %v, want unauthorized", err)
		}
		if _, err := c.ListTags(ctx, core.NewCaller([]string{bearer}, "")); codeOf(err) != wire.CodeForbidden {
			t.Fatalf("ListTags with an ID token: %v, want forbidden", err)
		}
	})
}

// TestCore_RefusalsCounted: every refusal of access control is counted
// once, where it is made, and marked so (core.Counted) that an edge does
// not count it again; bad input is no refusal.
func TestCore_RefusalsCounted(t *testing.T) {
	c, bearer, refused := policyCore(t, core.AuthToken)
	ctx := context.Background()
	_, err401 := c.NextID(ctx, core.NewCaller(nil, ""), core.IDsRequest{Tag: "order"})
	_, err403 := c.NextID(ctx, core.NewCaller([]string{bearer}, ""), core.IDsRequest{Tag: "user"})
	_, err400 := c.NextID(ctx, core.NewCaller([]string{bearer}, ""), core.IDsRequest{Tag: "order", Bad: core.ErrTagTwice})
	if got := *refused; len(got) != 2 || got[0] != wire.CodeUnauthorized || got[1] != wire.CodeForbidden {
		t.Fatalf("refusals counted: %v, want [unauthorized forbidden]", got)
	}
	if !core.Counted(err401) || !core.Counted(err403) || core.Counted(err400) {
		t.Fatalf("Counted: 401 %v, 403 %v, 400 %v; want true, true, false", core.Counted(err401), core.Counted(err403), core.Counted(err400))
	}
}

// TestCore_PrecheckAdminScope: the admin operations' precheck, which an
// adapter runs before it reads a body, refuses a valid token without the
// admin scope too, so that such a caller's body is never read.
func TestCore_PrecheckAdminScope(t *testing.T) {
	c, bearer, _ := policyCore(t, core.AuthToken)
	ctx := context.Background()
	holder := core.NewCaller([]string{bearer}, "10.0.0.1:1")
	if got := codeOf(c.Precheck(ctx, holder, core.AccessAdmin)); got != wire.CodeForbidden {
		t.Fatalf("Precheck(admin) of an ids:order token = %q, want %q", got, wire.CodeForbidden)
	}
	if got := codeOf(c.Precheck(ctx, holder, core.AccessIDs)); got != "" {
		t.Fatalf("Precheck(ids) of an ids:order token = %q, want it let through (the tag is in the body)", got)
	}
	if got := codeOf(c.Precheck(ctx, core.NewCaller(nil, "10.0.0.1:1"), core.AccessAdmin)); got != wire.CodeUnauthorized {
		t.Fatalf("Precheck(admin) without a token = %q, want %q", got, wire.CodeUnauthorized)
	}
}
