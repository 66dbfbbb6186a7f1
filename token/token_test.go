package token_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/idmint/idmint/token"
)

func TestNew(t *testing.T) {
	tok, bearer, err := token.New("app", []string{"ids:order", "ids:shop*", "monitor"})
	if err != nil {
		t.Fatal(err)
	}
	id, secret, ok := token.Parse(bearer)
	if !ok || id != tok.ID || len(bearer) != token.Len || !tok.Matches(secret) || tok.Matches(secret[1:]+"x") {
		t.Fatalf("token %q: id %q ok %v", bearer, id, ok)
	}
	if strings.Contains(string(tok.Hash), secret) {
		t.Fatal("the hash holds the secret")
	}
	for _, bad := range [][]string{nil, {"root"}, {"ids:"}, {"ids:bad tag"}, {"ids:-x*"}, {"admin", ""}} {
		if _, _, err := token.New("x", bad); !errors.Is(err, token.ErrInvalid) {
			t.Errorf("scopes %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, _, err := token.New("", []string{"ids"}); !errors.Is(err, token.ErrInvalid) {
		t.Errorf("an empty name: %v, want ErrInvalid", err)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1), 2 * token.MaxRate} {
		if err := token.ValidateRate(bad); !errors.Is(err, token.ErrInvalid) {
			t.Errorf("rate %v: %v, want ErrInvalid", bad, err)
		}
	}
}

// FuzzParse: any string parses or not without panicking; a string that
// parses has the token's shape, and a fresh token always parses.
func FuzzParse(f *testing.F) {
	_, good, _ := token.New("seed", []string{"ids"})
	for _, s := range []string{good, "", "idm_", "idm_aaaaaaaaaaaaaaaa_", good[:len(good)-1], good + "x", strings.ToUpper(good), "Bearer " + good} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := token.Parse(s)
		if !ok {
			return
		}
		if len(s) != token.Len || len(id) != 16 || len(secret) != 43 || s != "idm_"+id+"_"+secret {
			t.Fatalf("Parse(%q) = %q, %q", s, id, secret)
		}
	})
}
