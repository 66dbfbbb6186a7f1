package allocator_test

import (
	"strings"
	"testing"

	"github.com/idmint/idmint/allocator"
)

func TestNewToken(t *testing.T) {
	tok, bearer, err := allocator.NewToken("app", []string{"ids:order", "ids:shop*", "monitor"})
	if err != nil {
		t.Fatal(err)
	}
	id, secret, ok := allocator.ParseToken(bearer)
	if !ok || id != tok.ID || len(bearer) != allocator.TokenLen || !tok.Matches(secret) || tok.Matches(secret[1:]+"x") {
		t.Fatalf("token %q: id %q ok %v", bearer, id, ok)
	}
	if strings.Contains(string(tok.Hash), secret) {
		t.Fatal("the hash holds the secret")
	}
	for _, bad := range [][]string{nil, {"root"}, {"ids:"}, {"ids:bad tag"}, {"ids:-x*"}, {"admin", ""}} {
		if _, _, err := allocator.NewToken("x", bad); err == nil {
			t.Errorf("scopes %q accepted", bad)
		}
	}
	if _, _, err := allocator.NewToken("", []string{"ids"}); err == nil {
		t.Error("an empty name accepted")
	}
}

// FuzzParseToken: any string parses or not without panicking; a string that
// parses has the token's shape, and a fresh token always parses.
func FuzzParseToken(f *testing.F) {
	_, good, _ := allocator.NewToken("seed", []string{"ids"})
	for _, s := range []string{good, "", "idm_", "idm_aaaaaaaaaaaaaaaa_", good[:len(good)-1], good + "x", strings.ToUpper(good), "Bearer " + good} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := allocator.ParseToken(s)
		if !ok {
			return
		}
		if len(s) != allocator.TokenLen || len(id) != 16 || len(secret) != 43 || s != "idm_"+id+"_"+secret {
			t.Fatalf("ParseToken(%q) = %q, %q", s, id, secret)
		}
	})
}
