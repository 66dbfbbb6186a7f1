package pgsecrets

import (
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestSecrets: a connect error gives its user, password, database and
// every host with its port; any other error gives nothing.
func TestSecrets(t *testing.T) {
	ce := &pgconn.ConnectError{Config: &pgconn.Config{User: "app", Password: "hunter2", Database: "ids", Host: "db1", Port: 5432,
		Fallbacks: []*pgconn.FallbackConfig{{Host: "db2", Port: 6432}}}}
	got := secrets(ce)
	for _, want := range []string{"app", "hunter2", "ids", "db1", "db1:5432", "db2", "db2:6432"} {
		if !slices.Contains(got, want) {
			t.Errorf("secrets lack %q: %v", want, got)
		}
	}
	if s := secrets(errors.New("dial tcp: refused")); s != nil {
		t.Errorf("secrets of a plain error: %v", s)
	}
}
