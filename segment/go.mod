module github.com/idmint/idmint/segment

go 1.26.8

require (
	github.com/google/uuid v1.6.0
	github.com/idmint/idmint/wire v0.0.0-00010101000000-000000000000
)

replace github.com/idmint/idmint/wire => ../wire
