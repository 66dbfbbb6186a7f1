package postgres_test

import (
	"testing"

	"github.com/idmint/idmint/region/regiontest"
	"github.com/idmint/idmint/testkit/pgstore"
)

// TestPostgres_Regions: the region contract on PostgreSQL databases, one
// per region.
func TestPostgres_Regions(t *testing.T) {
	regiontest.Run(t, func(t *testing.T) regiontest.Store { s, _ := pgstore.New(t); return s })
}
