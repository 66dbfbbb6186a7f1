package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idmint/idmint/token"
)

// CreateToken implements token.Store.
func (m *Store) CreateToken(ctx context.Context, t token.Token) (token.Token, error) {
	if err := ctx.Err(); err != nil {
		return token.Token{}, err
	}
	if err := token.ValidateRate(t.IDsPerSecond); err != nil {
		return token.Token{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.tokens {
		if o.ID == t.ID {
			return token.Token{}, fmt.Errorf("create token: id %q exists", t.ID)
		}
	}
	t.CreatedAt = time.Now().UTC()
	m.tokens = append(m.tokens, t)
	return t, nil
}

// ListTokens implements token.Store.
func (m *Store) ListTokens(ctx context.Context) ([]token.Token, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]token.Token(nil), m.tokens...), nil
}

// RevokeToken implements token.Store.
func (m *Store) RevokeToken(ctx context.Context, id string) (token.Token, error) {
	if err := ctx.Err(); err != nil {
		return token.Token{}, err
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
	return token.Token{}, token.NotFound(id)
}
