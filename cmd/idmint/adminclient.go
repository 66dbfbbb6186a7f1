package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// adminClient is allocator.Admin and tokenAdmin over a running instance's
// /v1 admin API, for `idmint tag|token … --server URL --token T`: no
// database credentials needed.
type adminClient struct {
	base   string
	token  string
	client *http.Client
}

var (
	_ allocator.Admin = (*adminClient)(nil)
	_ tokenAdmin      = (*adminClient)(nil)
)

// pathTokens is the token admin API.
const pathTokens = "/v1/tokens"

func newAdminClient(server, token string, hc *http.Client) (*adminClient, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want http(s)://host:port", truncateArg(server))
	}
	if token == "" {
		return nil, fmt.Errorf("--server needs --token (IDMINT_ADMIN_TOKEN): a token with the admin scope")
	}
	return &adminClient{base: strings.TrimRight(server, "/"), token: token, client: hc}, nil
}

// call sends one request and decodes a TagJSON (or a list) into out. An
// error reply becomes wire.DecodeError's, which matches the sentinels it stands
// for, so the commands treat both modes alike.
func (c *adminClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("admin api: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("admin api: %w", err)
	}
	if resp.StatusCode >= 300 {
		// The decoded error matches the sentinels of its code
		// (allocator.ErrExists, token.ErrUnknown, ...).
		err := wire.DecodeError(resp.StatusCode, resp.Header.Get("Retry-After"), data)
		if wire.CodeOf(err) == wire.CodeHTTPError {
			return fmt.Errorf("admin api: %s %s: %s", method, path, resp.Status)
		}
		return fmt.Errorf("admin api: %w (%s)", err, wire.CodeOf(err))
	}
	return json.Unmarshal(data, out)
}

func fromJSON(t wire.Tag) allocator.Tag {
	return allocator.Tag{Name: t.Tag, MaxID: t.MaxID, Step: t.Step, MaxStep: t.MaxStep, Description: t.Description,
		Runway: httpapi.RunwayOf(t.RunwaySeconds)}
}

// CreateTag implements allocator.Admin.
func (c *adminClient) CreateTag(ctx context.Context, spec allocator.TagSpec) (allocator.Tag, error) {
	var t wire.Tag
	body := map[string]any{
		"biz_tag": spec.Name, "start": spec.Start, "description": spec.Description,
		"runway_seconds": spec.Runway.Seconds(),
	}
	// 0 is the store's "default"; the admin API wants such a field left out.
	if spec.Step > 0 {
		body["step"] = spec.Step
	}
	if spec.MaxStep > 0 {
		body["max_step"] = spec.MaxStep
	}
	err := c.call(ctx, http.MethodPost, "/v1/tags", body, &t)
	return fromJSON(t), err
}

// Tags implements allocator.Admin.
func (c *adminClient) Tags(ctx context.Context) ([]allocator.Tag, error) {
	var list struct{ Tags []wire.Tag }
	if err := c.call(ctx, http.MethodGet, "/v1/tags", nil, &list); err != nil {
		return nil, err
	}
	out := make([]allocator.Tag, 0, len(list.Tags))
	for _, t := range list.Tags {
		out = append(out, fromJSON(t))
	}
	return out, nil
}

// SetStep implements allocator.Admin.
func (c *adminClient) SetStep(ctx context.Context, name string, step, maxStep int64) (allocator.Tag, error) {
	var t wire.Tag
	err := c.call(ctx, http.MethodPatch, "/v1/tags/"+url.PathEscape(name), map[string]any{"step": step, "max_step": maxStep}, &t)
	return fromJSON(t), err
}

// Bump implements allocator.Admin. On ErrNotRaised it returns the tag as
// it stands.
func (c *adminClient) Bump(ctx context.Context, name string, to, by int64) (allocator.Tag, error) {
	var t wire.Tag
	body := map[string]any{}
	if to != 0 {
		body["to"] = to
	}
	if by != 0 {
		body["by"] = by
	}
	err := c.call(ctx, http.MethodPost, "/v1/tags/"+url.PathEscape(name)+"/bump", body, &t)
	return fromJSON(t), err
}

// SetRunway implements allocator.Admin.
func (c *adminClient) SetRunway(ctx context.Context, name string, runway time.Duration) (allocator.Tag, error) {
	var t wire.Tag
	err := c.call(ctx, http.MethodPatch, "/v1/tags/"+url.PathEscape(name), map[string]any{"runway_seconds": runway.Seconds()}, &t)
	return fromJSON(t), err
}

// Describe implements allocator.Admin.
func (c *adminClient) Describe(ctx context.Context, name, description string) (allocator.Tag, error) {
	var t wire.Tag
	err := c.call(ctx, http.MethodPatch, "/v1/tags/"+url.PathEscape(name), map[string]any{"description": description}, &t)
	return fromJSON(t), err
}

// createToken implements tokenAdmin: the server makes the secret and shows
// it in this reply only.
func (c *adminClient) createToken(ctx context.Context, name string, scopes []string, rate float64) (token.Token, string, error) {
	var created wire.CreatedToken
	err := c.call(ctx, http.MethodPost, pathTokens, wire.CreateTokenRequest{Name: name, Scopes: scopes, IDsPerSecond: rate}, &created)
	if err == nil && created.Secret == "" {
		err = fmt.Errorf("admin api: POST %s: no token in the reply", pathTokens)
	}
	return tokenFromWire(created.Token), created.Secret, err
}

// ListTokens implements tokenAdmin.
func (c *adminClient) ListTokens(ctx context.Context) ([]token.Token, error) {
	var list struct{ Tokens []wire.Token }
	if err := c.call(ctx, http.MethodGet, pathTokens, nil, &list); err != nil {
		return nil, err
	}
	out := make([]token.Token, 0, len(list.Tokens))
	for _, t := range list.Tokens {
		out = append(out, tokenFromWire(t))
	}
	return out, nil
}

// RevokeToken implements tokenAdmin.
func (c *adminClient) RevokeToken(ctx context.Context, id string) (token.Token, error) {
	var t wire.Token
	err := c.call(ctx, http.MethodDelete, pathTokens+"/"+url.PathEscape(id), nil, &t)
	return tokenFromWire(t), err
}

// tokenFromWire is the token a wire.Token shows, without a hash.
func tokenFromWire(j wire.Token) token.Token {
	return token.Token{ID: j.ID, Name: j.Name, Scopes: j.Scopes, IDsPerSecond: j.IDsPerSecond, CreatedAt: j.CreatedAt, RevokedAt: j.RevokedAt}
}
