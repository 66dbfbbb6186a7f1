package servetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// FetchID asks url (…/id?biz_tag=T, …/snowflake) for one ID as text.
// answered reports whether the server answered at all.
func FetchID(ctx context.Context, c *http.Client, url string) (id int64, answered bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "text/plain")
	body, err := do(c, req)
	if err != nil {
		return 0, body != nil, err
	}
	id, err = strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	return id, true, err
}

// FetchIDs asks url (…/ids?biz_tag=T&count=N, …/snowflakes?count=N) for a
// batch of IDs as JSON. answered reports whether the server answered at
// all.
func FetchIDs(ctx context.Context, c *http.Client, url string) (ids []int64, answered bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	body, err := do(c, req)
	if err != nil {
		return nil, body != nil, err
	}
	var reply struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		return nil, true, fmt.Errorf("unreadable body: %w", err)
	}
	for _, s := range reply.IDs {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, true, err
		}
		ids = append(ids, id)
	}
	return ids, true, nil
}

// do sends req and returns the body of a 200; on any other status a
// non-nil body and an error naming the status.
func do(c *http.Client, req *http.Request) ([]byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return []byte{}, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, nil
}
