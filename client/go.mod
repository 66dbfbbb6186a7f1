module github.com/idmint/idmint/client

go 1.26.8

require (
	github.com/idmint/idmint/segment v0.0.0-00010101000000-000000000000
	github.com/idmint/idmint/wire v0.0.0-00010101000000-000000000000
)

require github.com/google/uuid v1.6.0 // indirect

replace (
	github.com/idmint/idmint/segment => ../segment
	github.com/idmint/idmint/wire => ../wire
)
