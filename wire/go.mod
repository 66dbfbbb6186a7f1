module github.com/idmint/idmint/wire

go 1.26.8
