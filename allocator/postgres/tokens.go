package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/internal/sqlstore"
	"github.com/idmint/idmint/token"
)

// CreateToken implements token.Store.
func (p *Store) CreateToken(ctx context.Context, t token.Token) (token.Token, error) {
	if err := token.ValidateRate(t.IDsPerSecond); err != nil {
		return token.Token{}, err
	}
	err := p.pool.QueryRow(ctx, `INSERT INTO idmint_tokens (id, name, secret_hash, scopes, ids_per_second) VALUES ($1, $2, $3, $4, NULLIF($5::double precision, 0)) RETURNING created_at`,
		t.ID, t.Name, t.Hash, strings.Join(t.Scopes, " "), t.IDsPerSecond).Scan(&t.CreatedAt)
	if err != nil {
		return token.Token{}, fmt.Errorf("create token: %w", err)
	}
	return t, nil
}

// ListTokens implements token.Store.
func (p *Store) ListTokens(ctx context.Context) ([]token.Token, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+sqlstore.TokenColumns+` FROM idmint_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (token.Token, error) {
		var t token.Token
		var scopes string
		err := row.Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.IDsPerSecond, &t.CreatedAt, &t.RevokedAt)
		t.Scopes = strings.Fields(scopes)
		return t, err
	})
}

// RevokeToken implements token.Store.
func (p *Store) RevokeToken(ctx context.Context, id string) (token.Token, error) {
	var t token.Token
	var scopes string
	err := p.pool.QueryRow(ctx, `UPDATE idmint_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING `+sqlstore.TokenColumns, id).
		Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.IDsPerSecond, &t.CreatedAt, &t.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return token.Token{}, token.NotFound(id)
	}
	t.Scopes = strings.Fields(scopes)
	return t, err
}
