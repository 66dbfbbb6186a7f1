package pgtest

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Binaries returns the directory of the PostgreSQL server binaries (initdb,
// pg_ctl, postgres), found as local mode finds them: $IDMINT_TEST_PG_BIN,
// `pg_config --bindir`, the newest /usr/lib/postgresql/*/bin, the directory
// of pg_ctl on PATH.
func Binaries() (string, error) { return findBinaries() }

// ServerUser returns the credential to run the server binaries with: nil
// when this process is not root, else the user postgres (initdb and postgres
// refuse to run as root).
func ServerUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and the server cannot run as root: %w (create a postgres user or run the tests as another user)", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
