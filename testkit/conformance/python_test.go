package conformance_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/idmint/idmint/testkit/servetest"
)

// TestPythonClient runs the Python client's own unittest suite
// (clients/python/tests) against a real idmint serve, built here once. It
// runs in make test too: the suite takes seconds. A machine without Python
// 3.11 skips it, unless IDMINT_TEST_REQUIRE_CLIENTS names python.
func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint serve")
	}
	python, why := findPython()
	if python == "" {
		if langSet(os.Getenv("IDMINT_TEST_REQUIRE_CLIENTS"))["python"] {
			t.Fatalf("IDMINT_TEST_REQUIRE_CLIENTS names python: %s", why)
		}
		t.Skipf("the Python client's tests: %s", why)
	}
	root := repoRoot(t)
	bin := servetest.Build(t)
	cmd := exec.Command(python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Dir = filepath.Join(root, "clients", "python")
	cmd.Env = append(os.Environ(), "IDMINT_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	t.Logf("%s", lastLines(out, 3))
}

var pythonVersion = regexp.MustCompile(`Python 3\.(\d+)`)

// findPython returns python3 when it is 3.11 or later, else "" and why.
func findPython() (string, string) {
	path, err := exec.LookPath("python3")
	if err != nil {
		return "", "no python3 on PATH (apt-get install python3)"
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	m := pythonVersion.FindSubmatch(out)
	if err != nil || m == nil {
		return "", "python3 --version: " + string(out)
	}
	if minor, _ := strconv.Atoi(string(m[1])); minor < 11 {
		return "", "python3 is " + string(out) + ", the client needs 3.11 or later"
	}
	return path, ""
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) []byte {
	end := len(b)
	for end > 0 && b[end-1] == '\n' {
		end--
	}
	i := end
	for ; i > 0 && n > 0; i-- {
		if b[i-1] == '\n' {
			n--
			if n == 0 {
				break
			}
		}
	}
	return b[i:end]
}
