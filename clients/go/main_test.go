package client_test

import (
	"os"
	"testing"

	"github.com/idmint/idmint/testkit/pgtest"
)

// TestMain gives the tests and benchmarks on PostgreSQL a server; it starts
// only if one of them asks.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
