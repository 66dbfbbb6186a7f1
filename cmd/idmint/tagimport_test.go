package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idmint/idmint/testkit/testutil"
)

// TestTagImport: a leaf_alloc export becomes tags whose first IDs are above
// every ID Leaf handed out; existing tags are raised, never lowered; a bad
// file or --dry-run changes nothing; a second run changes nothing.
func TestTagImport(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", dir)
	idmint(t, "tag", "create", "user")
	idmint(t, "tag", "create", "high", "--start", "1000000001")

	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	dump := write("leaf.sql", "INSERT INTO `leaf_alloc` VALUES ('order',4000001,1000,'orders','2017-03-16 13:12:45'),"+
		"('user',5000,2000,'users','2017-03-16 13:12:45'),('high',7,1000,'','2017-03-16 13:12:45'),"+
		"('big',10,5000000,'a big step','2017-03-16 13:12:45');\n")
	before := idmint(t, "tag", "list")

	bad := write("bad.csv", "biz_tag,max_id,step\norder,4000001,1000\nuser,lots,2000\n")
	if _, stderr, err := runErr("tag", "import", bad); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("a bad line: %v\n%s", err, stderr)
	}
	invalid := write("invalid.csv", "order,4000001,1000\nno spaces allowed,1,1\n")
	if _, _, err := runErr("tag", "import", invalid); err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("a tag name idmint refuses: %v", err)
	}
	plan := idmint(t, "tag", "import", "--dry-run", dump)
	if !strings.Contains(plan, "would create") || !strings.Contains(plan, "would raise") {
		t.Fatalf("--dry-run printed:\n%s", plan)
	}
	if after := idmint(t, "tag", "list"); after != before {
		t.Fatalf("a refused import or a dry run changed the tags:\n%s\nthen\n%s", before, after)
	}

	out := idmint(t, "tag", "import", "--margin", "10", dump)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{"order 4000001 1000 created 4000011", "user 5000 2000 raised 5010",
		"high 7 1000 unchanged 1000000000", "big 10 5000000 created 20"} {
		if !slices.Contains(lines, want) {
			t.Fatalf("import printed:\n%s\nwant a line %q", out, want)
		}
	}
	if again := idmint(t, "tag", "import", "--margin", "10", dump); strings.Count(again, "unchanged") != 4 {
		t.Fatalf("a second import changed something:\n%s", again)
	}

	base, _ := startServe(t)
	// Each tag's first ID is above Leaf's max_id and the margin (or above
	// its own max_id, where that was higher).
	for tag, above := range map[string]int64{"order": 4000011, "user": 5010, "high": 1000000000, "big": 20} {
		var one struct{ ID string }
		if status := testutil.GetJSON(t, base+"/id?biz_tag="+tag, &one); status != 200 {
			t.Fatalf("/id?biz_tag=%s: %d", tag, status)
		}
		if id, err := strconv.ParseInt(one.ID, 10, 64); err != nil || id <= above {
			t.Fatalf("%s: first ID %s, want above %d", tag, one.ID, above)
		}
	}

	// Leaf's callers, on Leaf's route, get the bare number, above the
	// export too.
	resp, err := http.Get(base + "/api/segment/get/order")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if id, err := strconv.ParseInt(string(body), 10, 64); resp.StatusCode != 200 || err != nil || id <= 4000011 {
		t.Fatalf("GET /api/segment/get/order: %d %q, want a bare ID above 4000011", resp.StatusCode, body)
	}
}
