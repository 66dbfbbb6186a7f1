package redact_test

import (
	"fmt"

	"github.com/idmint/idmint/internal/redact"
)

func ExampleString() {
	fmt.Println(redact.String("failed to connect to `user=idmint database=idmint`: 10.0.0.5:5432 (10.0.0.5): dial error"))
	// Output: failed to connect to `user=… database=…`: …:… (…): dial error
}
