package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idmint/idmint/internal/sqlstore"
	"github.com/idmint/idmint/token"
)

// CreateToken implements token.Store.
func (s *Store) CreateToken(ctx context.Context, t token.Token) (token.Token, error) {
	if err := token.ValidateRate(t.IDsPerSecond); err != nil {
		return token.Token{}, err
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
		return token.Token{}, fmt.Errorf("create token: %w", err)
	}
	return t, nil
}

// ListTokens implements token.Store.
func (s *Store) ListTokens(ctx context.Context) ([]token.Token, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sqlstore.TokenColumns+` FROM idmint_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []token.Token
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

// RevokeToken implements token.Store.
func (s *Store) RevokeToken(ctx context.Context, id string) (token.Token, error) {
	var t token.Token
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = scanSQLiteToken(tx.QueryRowContext(ctx,
			`UPDATE idmint_tokens SET revoked_at = COALESCE(revoked_at, `+nowSQL+`) WHERE id = ? RETURNING `+sqlstore.TokenColumns, id))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return token.Token{}, token.NotFound(id)
	}
	return t, err
}

func scanSQLiteToken(row sqlstore.RowScanner) (token.Token, error) {
	var t token.Token
	var scopes, created string
	var revoked sql.NullString
	if err := row.Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.IDsPerSecond, &created, &revoked); err != nil {
		return token.Token{}, err
	}
	t.Scopes = strings.Fields(scopes)
	var err error
	if t.CreatedAt, err = time.Parse(time.RFC3339Nano, created); err != nil {
		return token.Token{}, err
	}
	if revoked.Valid {
		r, err := time.Parse(time.RFC3339Nano, revoked.String)
		if err != nil {
			return token.Token{}, err
		}
		t.RevokedAt = &r
	}
	return t, nil
}
