package sqlite_test

import (
	"testing"

	"github.com/idmint/idmint/testkit/regiontest"
)

// TestSQLite_Regions: the region contract on SQLite files, one per region.
func TestSQLite_Regions(t *testing.T) {
	regiontest.Run(t, func(t *testing.T) regiontest.Store { return openSQLite(t, tempDB(t)) })
}
