package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/wire"
)

// claimSQLite makes a SQLite database claimed as region name of regions,
// with block, and returns its URL.
func claimSQLite(t *testing.T, name, regions, block string) string {
	t.Helper()
	url := "sqlite://" + filepath.Join(t.TempDir(), "idmint.db")
	idmint(t, "migrate", "--database-url", url)
	idmint(t, "region", "claim", "--database-url", url, "--name", name, "--regions", regions, "--block", block)
	return url
}

// serveErr runs serve with args until it fails or 5 s pass, and returns
// what it wrote to stderr and its error (nil: it served).
func serveErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	err := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--snowflake=false"}, args...), io.Discard, &stderr)
	return stderr.String(), err
}

func TestRegion_ClaimShow(t *testing.T) {
	url := claimSQLite(t, "eu", "eu,us,ap", "1000000")
	// The same claim again changes nothing; another is refused.
	idmint(t, "region", "claim", "--database-url", url, "--name", "eu", "--regions", "eu,us,ap", "--block", "1000000")
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"region", "claim", "--database-url", url, "--name", "us", "--regions", "eu,us,ap", "--block", "1000000"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("another region's claim: %v", err)
	}
	var share struct {
		Name   string `json:"name"`
		Epochs []struct {
			Block   string   `json:"block"`
			Regions []string `json:"regions"`
			Index   int      `json:"index"`
		} `json:"epochs"`
	}
	if err := json.Unmarshal([]byte(idmint(t, "region", "show", "--database-url", url, "--json")), &share); err != nil {
		t.Fatal(err)
	}
	if share.Name != "eu" || len(share.Epochs) != 1 || share.Epochs[0].Block != "1000000" || share.Epochs[0].Index != 0 {
		t.Fatalf("region show: %+v", share)
	}
}

// TestServe_Region: serve refuses a database whose share is another
// region's, or a database with a share without --region, or --region on a
// database with none, before anything is served; with the right region it
// serves the share and says so in /id/health.
func TestServe_Region(t *testing.T) {
	url := claimSQLite(t, "eu", "eu,us", "1000000")
	plain := "sqlite://" + filepath.Join(t.TempDir(), "plain.db")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"another region", []string{"--database-url", url, "--region", "us"}, `the database is region "eu"'s`},
		{"no --region", []string{"--database-url", url}, "serve it with --region eu"},
		{"a database without a share", []string{"--database-url", plain, "--region", "eu"}, "no region share"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := serveErr(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("serve %v: %v; want a refusal saying %q", tt.args, err, tt.want)
			}
		})
	}
	base, _ := startServe(t, "--database-url", url, "--region", "eu", "--tag", "order")
	id := getID(t, base, "order")
	if (id-1)/1_000_000%2 != 0 {
		t.Fatalf("region eu (index 0 of 2) handed out %d, in another region's block", id)
	}
	h := regionHealth(t, base)
	if h.Region == nil || h.Region.Name != "eu" || h.Region.Index != 0 || h.Region.Share.WorkerSlots != 8 {
		t.Fatalf("/id/health region: %+v", h.Region)
	}

	// A range reply carries the share that owns it, for clients of
	// several regions to compare.
	body := `{"biz_tag":"order","request_id":"` + uuid.NewString() + `","holder_key":"` + strings.Repeat("k", 32) + `"}`
	resp, err := http.Post(base+"/v1/segments", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seg wire.SegmentResponse
	if err := json.NewDecoder(resp.Body).Decode(&seg); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/segments: %d %v", resp.StatusCode, err)
	}
	if seg.Region == nil || seg.Region.Name != "eu" || !seg.Region.OwnsRange(seg.First, seg.Last) {
		t.Fatalf("range [%d, %d] replied with share %+v", seg.First, seg.Last, seg.Region)
	}
}

// TestServe_RegionPeers: a peer whose share overlaps ours with other blocks
// is refused before anything is served; an agreeing one is reported so.
func TestServe_RegionPeers(t *testing.T) {
	eu := claimSQLite(t, "eu", "eu,us", "1000000")
	euBase, _ := startServe(t, "--database-url", eu, "--region", "eu", "--tag", "order")

	bad := claimSQLite(t, "us", "eu,us", "2000000")
	_, err := serveErr(t, "--database-url", bad, "--region", "us", "--region-peer", euBase)
	if err == nil || !strings.Contains(err.Error(), "different blocks") {
		t.Fatalf("serve beside a peer with other blocks: %v; want a refusal", err)
	}
	twin := claimSQLite(t, "eu", "eu,us", "1000000")
	if _, err := serveErr(t, "--database-url", twin, "--region", "eu", "--region-peer", euBase); err == nil || !strings.Contains(err.Error(), "named") {
		t.Fatalf("serve beside a peer of the same region: %v; want a refusal", err)
	}

	us := claimSQLite(t, "us", "eu,us", "1000000")
	usBase, _ := startServe(t, "--database-url", us, "--region", "us", "--tag", "order", "--region-peer", euBase)
	if id := getID(t, usBase, "order"); (id-1)/1_000_000%2 != 1 {
		t.Fatalf("region us (index 1 of 2) handed out %d", id)
	}
	h := regionHealth(t, usBase)
	if len(h.Region.Peers) != 1 || !h.Region.Peers[0].Agrees || h.Region.Peers[0].Name != "eu" {
		t.Fatalf("peers: %+v", h.Region.Peers)
	}
	if h.Region.Share.WorkerSlot != 1 {
		t.Fatalf("worker slot %d", h.Region.Share.WorkerSlot)
	}
}

type regionDoc struct {
	Region *struct {
		Name  string `json:"name"`
		Index int    `json:"index"`
		Share struct {
			WorkerSlot  int `json:"worker_slot"`
			WorkerSlots int `json:"worker_slots"`
			Epochs      []struct {
				To string `json:"to"`
			} `json:"epochs"`
		} `json:"share"`
		Conflict any `json:"conflict"`
		Peers    []struct {
			Name   string `json:"name"`
			Agrees bool   `json:"agrees"`
		} `json:"peers"`
	} `json:"region"`
}

func regionHealth(t *testing.T, base string) regionDoc {
	t.Helper()
	resp, err := http.Get(base + "/id/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h regionDoc
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

func getID(t *testing.T, base, tag string) int64 {
	t.Helper()
	resp, err := http.Get(base + "/id?biz_tag=" + tag)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		ID int64 `json:"id,string"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /id: %d, %v", resp.StatusCode, err)
	}
	return r.ID
}

// TestServe_RegionSplitPeers: a region added by split to a deployment whose
// instances check each other serves beside them, and the instances started
// before the split say the share their database has now (fenced, with the
// new epoch) and still agree with each other: an instance reads its share
// from its database while it runs, not once at start, so that a peer's
// split is never taken for an overlap.
func TestServe_RegionSplitPeers(t *testing.T) {
	eu := claimSQLite(t, "eu", "eu,us", "1000000")
	us := claimSQLite(t, "us", "eu,us", "1000000")
	usBase, _ := startServe(t, "--database-url", us, "--region", "us", "--tag", "order")
	euBase, _ := startServe(t, "--database-url", eu, "--region", "eu", "--tag", "order",
		"--region-peer", usBase, "--region-peer-every", "1s")
	getID(t, euBase, "order")
	getID(t, usBase, "order")

	sa := "sqlite://" + filepath.Join(t.TempDir(), "sa.db")
	idmint(t, "migrate", "--database-url", sa)
	idmint(t, "region", "split", "--database-url", eu, "--database-url", us, "--database-url", sa, "--add", "sa")
	saBase, _ := startServe(t, "--database-url", sa, "--region", "sa", "--tag", "order",
		"--region-peer", euBase, "--region-peer", usBase)
	// The new epoch starts at a cycle of 2 blocks above the highest max_id
	// plus one cycle: 4,000,001 here; sa is its index 2 of 3.
	if id := getID(t, saBase, "order"); id < 4_000_001 || (id-4_000_001)/1_000_000%3 != 2 {
		t.Fatalf("region sa handed out %d, not in its blocks of the new epoch", id)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := regionHealth(t, euBase)
		if len(h.Region.Share.Epochs) == 2 && h.Region.Share.Epochs[0].To == "4000001" &&
			len(h.Region.Peers) == 1 && h.Region.Peers[0].Agrees && h.Region.Conflict == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("eu's health 10 s after the split: share %+v, peers %+v, conflict %v", h.Region.Share, h.Region.Peers, h.Region.Conflict)
		}
		time.Sleep(50 * time.Millisecond)
	}
	getID(t, euBase, "order")
	getID(t, saBase, "order")
}

// TestRegion_SplitMultiHostURL: split takes a multi-host PostgreSQL URL (a
// Patroni cluster's, hosts separated by commas) as one database, not as
// several values cut at the commas.
func TestRegion_SplitMultiHostURL(t *testing.T) {
	eu := claimSQLite(t, "eu", "eu", "1000000")
	sa := pgtest.Shared(t).NewDatabase(t)
	idmint(t, "migrate", "--database-url", sa)
	u, err := url.Parse(sa)
	if err != nil {
		t.Fatal(err)
	}
	u.Host += ",127.0.0.1:1" // a second host, never reached: the first answers
	out := idmint(t, "region", "split", "--add", "sa", "--database-url", eu, "--database-url", u.String())
	if !strings.Contains(out, "regions eu,sa from there") {
		t.Fatalf("split over a multi-host URL:\n%s", out)
	}
}
