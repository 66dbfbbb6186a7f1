package postgres_test

import (
	"testing"

	"github.com/idmint/idmint/region/regiontest"
)

// TestPostgres_Regions: the region contract on PostgreSQL databases, one
// per region.
func TestPostgres_Regions(t *testing.T) {
	regiontest.Run(t, func(t *testing.T) regiontest.Store { s, _ := openPostgres(t); return s })
}
