package token

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/idmint/idmint/wire"
	"github.com/idmint/idmint/wire/tagname"
)

var (
	// ErrUnknown means no token has the ID given.
	ErrUnknown = wire.ErrUnknownToken
	// ErrInvalid means a token's settings (name, scopes, rate) are out of
	// bounds: New, ValidateScope and ValidateRate wrap it.
	ErrInvalid = wire.ErrInvalidTokenSpec
)

// Token is a bearer token as stored: its public ID, a name for people, its
// scopes and the SHA-256 of its secret. The secret itself is shown once, by
// New, and never stored.
type Token struct {
	ID     string
	Name   string
	Scopes []string
	Hash   []byte
	// IDsPerSecond bounds the IDs the token may take per second; 0: the
	// instance's per-token bound applies (see ValidateRate).
	IDsPerSecond float64
	CreatedAt    time.Time
	RevokedAt    *time.Time // nil while the token is valid
}

// Store keeps bearer tokens. Every allocator.Store is one (postgres,
// sqlite and memstore implement it).
type Store interface {
	// CreateToken stores t (ID, Name, Scopes, Hash).
	CreateToken(ctx context.Context, t Token) (Token, error)
	// ListTokens returns every token, revoked ones included, oldest first.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken revokes the token with this ID, for good; revoking twice
	// is no error. It returns ErrUnknown for an unknown ID.
	RevokeToken(ctx context.Context, id string) (Token, error)
}

// A token reads idm_<id>_<secret>: 16 base32 characters of ID, then 32
// random bytes in unpadded base64url.
const (
	prefix    = "idm_"
	idLen     = 16
	secretLen = 43
	// Len is the length of every token.
	Len = len(prefix) + idLen + 1 + secretLen
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// New makes a token named name with scopes (see ValidateScope) and
// returns it with the bearer string to hand to its user, which is shown
// once and stored only as a hash.
func New(name string, scopes []string) (Token, string, error) {
	if err := Validate(name, scopes); err != nil {
		return Token{}, "", err
	}
	var raw [10 + 32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Token{}, "", fmt.Errorf("token: %w", err)
	}
	id := strings.ToLower(idEncoding.EncodeToString(raw[:10]))
	secret := base64.RawURLEncoding.EncodeToString(raw[10:])
	hash := sha256.Sum256([]byte(secret))
	return Token{ID: id, Name: name, Scopes: scopes, Hash: hash[:]}, prefix + id + "_" + secret, nil
}

// Validate reports whether New takes name and scopes: a name of 1 to 100
// bytes, at least one scope, each one ValidateScope takes.
func Validate(name string, scopes []string) error {
	if n := len(name); n < 1 || n > 100 {
		return fmt.Errorf("%w: token name: %d bytes, want 1 to 100", ErrInvalid, n)
	}
	if len(scopes) == 0 {
		return fmt.Errorf("%w: give at least one scope (admin, monitor, ids, ids:TAG or ids:PREFIX*)", ErrInvalid)
	}
	for _, s := range scopes {
		if err := ValidateScope(s); err != nil {
			return err
		}
	}
	return nil
}

// Parse splits a bearer string into its ID and secret. It looks only
// at the string's shape; Token.Matches checks the secret.
func Parse(s string) (id, secret string, ok bool) {
	if len(s) != Len || !strings.HasPrefix(s, prefix) || s[len(prefix)+idLen] != '_' {
		return "", "", false
	}
	id = s[len(prefix) : len(prefix)+idLen]
	secret = s[len(prefix)+idLen+1:]
	if !ValidID(id) {
		return "", "", false
	}
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return "", "", false
		}
	}
	return id, secret, true
}

// ValidID reports whether id has the shape of a token's ID: 16 characters
// of lower-case base32.
func ValidID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Matches reports, in constant time, whether secret is the token's.
func (t Token) Matches(secret string) bool {
	hash := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(hash[:], t.Hash) == 1
}

// ValidateScope reports whether s is a scope: admin (the /v1 admin API),
// monitor (health and metrics when they are protected), ids (IDs of every
// tag), ids:TAG (IDs of one tag) or ids:PREFIX* (IDs of the tags whose name
// starts with PREFIX).
func ValidateScope(s string) error {
	switch s {
	case "admin", "monitor", "ids":
		return nil
	}
	if tag, ok := strings.CutPrefix(s, "ids:"); ok {
		if prefix, ok := strings.CutSuffix(tag, "*"); ok {
			if prefix == "" || tagname.Valid(prefix) {
				return nil
			}
		} else if tagname.Valid(tag) {
			return nil
		}
	}
	return fmt.Errorf("%w: scope %q: want admin, monitor, ids, ids:TAG or ids:PREFIX*", ErrInvalid, tagname.Truncate(s, 80))
}

// MaxRate is the largest IDsPerSecond a token may have.
const MaxRate = 1e12

// ValidateRate reports whether r is a token's IDsPerSecond: 0 (the
// instance's bound) or a positive number up to MaxRate.
func ValidateRate(r float64) error {
	if r == 0 || (r > 0 && r <= MaxRate) {
		return nil
	}
	return fmt.Errorf("%w: token rate %v: want 0 (the instance's bound) or more than 0 up to %g IDs per second", ErrInvalid, r, MaxRate)
}

// NotFound returns the error a store's RevokeToken gives for an unknown
// id: ErrUnknown, quoting at most 40 bytes of id.
func NotFound(id string) error {
	return fmt.Errorf("%w: %q", ErrUnknown, tagname.Truncate(id, 40))
}
