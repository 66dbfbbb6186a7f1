package ha

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestClusterUp_PortTaken: cluster.sh up checks every port it will use
// before it starts anything, and fails naming the port, what it was for,
// and the process holding it.
func TestClusterUp_PortTaken(t *testing.T) {
	for _, tool := range []string{"bash", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// idmint0 listens on IDMINT_HA_PORT + 2648.
	base := port - 2648
	if base-3000 < 1024 || base+2649 > 65535 {
		t.Skipf("port %d leaves no room for the cluster's other ports", port)
	}
	dir := filepath.Join(t.TempDir(), "ha")
	cmd := exec.Command("bash", "cluster.sh", "up")
	cmd.Env = append(os.Environ(), "IDMINT_HA_DIR="+dir, "IDMINT_HA_PORT="+strconv.Itoa(base), "IDMINT_BIN=/nonexistent")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("cluster.sh up with port %d taken: %v, want exit status 1\n%s", port, err, out.String())
	}
	for _, want := range []string{
		fmt.Sprintf("port %d (for idmint0) is taken", port),
		fmt.Sprintf("held by pid %d ", os.Getpid()),
		"IDMINT_HA_PORT",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s was created (%v): up started before checking its ports", dir, err)
	}
}
