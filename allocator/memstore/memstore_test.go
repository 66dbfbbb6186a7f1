package memstore_test

import (
	"testing"

	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/testkit/storetest"
)

func TestMemStore_Contract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return memstore.New() })
}
