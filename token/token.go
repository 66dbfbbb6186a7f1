package allocator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnknownToken means no token has the ID given.
var ErrUnknownToken = errors.New("unknown token")

// Token is a bearer token as stored: its public ID, a name for people, its
// scopes and the SHA-256 of its secret. The secret itself is shown once, by
// NewToken, and never stored.
type Token struct {
	ID     string
	Name   string
	Scopes []string
	Hash   []byte
	// IDsPerSecond bounds the IDs the token may take per second; 0: the
	// instance's per-token bound applies (see ValidateTokenRate).
	IDsPerSecond float64
	CreatedAt    time.Time
	RevokedAt    *time.Time // nil while the token is valid
}

// TokenStore keeps bearer tokens. Postgres, SQLite and MemStore implement
// it.
type TokenStore interface {
	// CreateToken stores t (ID, Name, Scopes, Hash).
	CreateToken(ctx context.Context, t Token) (Token, error)
	// ListTokens returns every token, revoked ones included, oldest first.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken revokes the token with this ID, for good; revoking twice
	// is no error. It returns ErrUnknownToken for an unknown ID.
	RevokeToken(ctx context.Context, id string) (Token, error)
}

var (
	_ TokenStore = (*Postgres)(nil)
	_ TokenStore = (*SQLite)(nil)
	_ TokenStore = (*MemStore)(nil)
)

// A token reads idm_<id>_<secret>: 16 base32 characters of ID, then 32
// random bytes in unpadded base64url.
const (
	tokenPrefix    = "idm_"
	tokenIDLen     = 16
	tokenSecretLen = 43
	// TokenLen is the length of every token.
	TokenLen = len(tokenPrefix) + tokenIDLen + 1 + tokenSecretLen
)

var tokenIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewToken makes a token named name with scopes (see ValidateScope) and
// returns it with the bearer string to hand to its user, which is shown
// once and stored only as a hash.
func NewToken(name string, scopes []string) (Token, string, error) {
	if n := len(name); n < 1 || n > 100 {
		return Token{}, "", fmt.Errorf("token name: %d bytes, want 1 to 100", n)
	}
	if len(scopes) == 0 {
		return Token{}, "", errors.New("token: give at least one scope (admin, monitor, ids, ids:TAG or ids:PREFIX*)")
	}
	for _, s := range scopes {
		if err := ValidateScope(s); err != nil {
			return Token{}, "", err
		}
	}
	var raw [10 + 32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Token{}, "", fmt.Errorf("token: %w", err)
	}
	id := strings.ToLower(tokenIDEncoding.EncodeToString(raw[:10]))
	secret := base64.RawURLEncoding.EncodeToString(raw[10:])
	hash := sha256.Sum256([]byte(secret))
	return Token{ID: id, Name: name, Scopes: scopes, Hash: hash[:]}, tokenPrefix + id + "_" + secret, nil
}

// ParseToken splits a bearer string into its ID and secret. It looks only
// at the string's shape; Token.Matches checks the secret.
func ParseToken(s string) (id, secret string, ok bool) {
	if len(s) != TokenLen || !strings.HasPrefix(s, tokenPrefix) || s[len(tokenPrefix)+tokenIDLen] != '_' {
		return "", "", false
	}
	id = s[len(tokenPrefix) : len(tokenPrefix)+tokenIDLen]
	secret = s[len(tokenPrefix)+tokenIDLen+1:]
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return "", "", false
		}
	}
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return "", "", false
		}
	}
	return id, secret, true
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
			if prefix == "" || ValidateTag(prefix) == nil {
				return nil
			}
		} else if ValidateTag(tag) == nil {
			return nil
		}
	}
	return fmt.Errorf("scope %q: want admin, monitor, ids, ids:TAG or ids:PREFIX*", truncate(s, 80))
}

// MaxTokenRate is the largest IDsPerSecond a token may have.
const MaxTokenRate = 1e12

// ValidateTokenRate reports whether r is a token's IDsPerSecond: 0 (the
// instance's bound) or a positive number up to MaxTokenRate.
func ValidateTokenRate(r float64) error {
	if r == 0 || (r > 0 && r <= MaxTokenRate) {
		return nil
	}
	return fmt.Errorf("token rate %v: want 0 (the instance's bound) or more than 0 up to %g IDs per second", r, MaxTokenRate)
}

// truncate shortens s to at most n bytes for messages, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// CreateToken implements TokenStore.
func (p *Postgres) CreateToken(ctx context.Context, t Token) (Token, error) {
	if err := ValidateTokenRate(t.IDsPerSecond); err != nil {
		return Token{}, err
	}
	err := p.pool.QueryRow(ctx, `INSERT INTO idmint_tokens (id, name, secret_hash, scopes, ids_per_second) VALUES ($1, $2, $3, $4, NULLIF($5::double precision, 0)) RETURNING created_at`,
		t.ID, t.Name, t.Hash, strings.Join(t.Scopes, " "), t.IDsPerSecond).Scan(&t.CreatedAt)
	if err != nil {
		return Token{}, fmt.Errorf("create token: %w", err)
	}
	return t, nil
}

const tokenColumns = `id, name, secret_hash, scopes, COALESCE(ids_per_second, 0), created_at, revoked_at`

// ListTokens implements TokenStore.
func (p *Postgres) ListTokens(ctx context.Context) ([]Token, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+tokenColumns+` FROM idmint_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) {
		var t Token
		var scopes string
		err := row.Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.IDsPerSecond, &t.CreatedAt, &t.RevokedAt)
		t.Scopes = strings.Fields(scopes)
		return t, err
	})
}

// RevokeToken implements TokenStore.
func (p *Postgres) RevokeToken(ctx context.Context, id string) (Token, error) {
	var t Token
	var scopes string
	err := p.pool.QueryRow(ctx, `UPDATE idmint_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING `+tokenColumns, id).
		Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.IDsPerSecond, &t.CreatedAt, &t.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownToken, truncate(id, 40))
	}
	t.Scopes = strings.Fields(scopes)
	return t, err
}

// CreateToken implements TokenStore.
func (s *SQLite) CreateToken(ctx context.Context, t Token) (Token, error) {
	if err := ValidateTokenRate(t.IDsPerSecond); err != nil {
		return Token{}, err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var created string
		err := tx.QueryRowContext(ctx, `INSERT INTO idmint_tokens (id, name, secret_hash, scopes, ids_per_second) VALUES (?, ?, ?, ?, NULLIF(?, 0)) RETURNING created_at`,
			t.ID, t.Name, t.Hash, strings.Join(t.Scopes, " "), t.IDsPerSecond).Scan(&created)
		if err != nil {
			return err
		}
		t.CreatedAt, err = time.Parse(time.RFC3339Nano, created)
		return err
	})
	if err != nil {
		return Token{}, fmt.Errorf("create token: %w", err)
	}
	return t, nil
}

// ListTokens implements TokenStore.
func (s *SQLite) ListTokens(ctx context.Context) ([]Token, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+tokenColumns+` FROM idmint_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		t, err := scanSQLiteToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken implements TokenStore.
func (s *SQLite) RevokeToken(ctx context.Context, id string) (Token, error) {
	var t Token
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = scanSQLiteToken(tx.QueryRowContext(ctx,
			`UPDATE idmint_tokens SET revoked_at = COALESCE(revoked_at, `+nowSQL+`) WHERE id = ? RETURNING `+tokenColumns, id))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownToken, truncate(id, 40))
	}
	return t, err
}

func scanSQLiteToken(row rowScanner) (Token, error) {
	var t Token
	var scopes, created string
	var revoked sql.NullString
	if err := row.Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.IDsPerSecond, &created, &revoked); err != nil {
		return Token{}, err
	}
	t.Scopes = strings.Fields(scopes)
	var err error
	if t.CreatedAt, err = time.Parse(time.RFC3339Nano, created); err != nil {
		return Token{}, err
	}
	if revoked.Valid {
		r, err := time.Parse(time.RFC3339Nano, revoked.String)
		if err != nil {
			return Token{}, err
		}
		t.RevokedAt = &r
	}
	return t, nil
}

// CreateToken implements TokenStore.
func (m *MemStore) CreateToken(ctx context.Context, t Token) (Token, error) {
	if err := ctx.Err(); err != nil {
		return Token{}, err
	}
	if err := ValidateTokenRate(t.IDsPerSecond); err != nil {
		return Token{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.tokens {
		if o.ID == t.ID {
			return Token{}, fmt.Errorf("create token: id %q exists", t.ID)
		}
	}
	t.CreatedAt = time.Now().UTC()
	m.tokens = append(m.tokens, t)
	return t, nil
}

// ListTokens implements TokenStore.
func (m *MemStore) ListTokens(ctx context.Context) ([]Token, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Token(nil), m.tokens...), nil
}

// RevokeToken implements TokenStore.
func (m *MemStore) RevokeToken(ctx context.Context, id string) (Token, error) {
	if err := ctx.Err(); err != nil {
		return Token{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.tokens {
		if t := &m.tokens[i]; t.ID == id {
			if t.RevokedAt == nil {
				now := time.Now().UTC()
				t.RevokedAt = &now
			}
			return *t, nil
		}
	}
	return Token{}, fmt.Errorf("%w: %q", ErrUnknownToken, truncate(id, 40))
}
