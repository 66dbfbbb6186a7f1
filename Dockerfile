# Container image of idmint, built from source (needs the golang image, so a
# registry). Offline, `make image` builds the binary on the host and packs it
# with .ci/Dockerfile.prebuilt instead; keep the final stages of both alike.
#
#   docker build -t idmint .
#   docker run --rm -p 8080:8080 -e IDMINT_DATABASE_URL=postgres://... idmint serve --migrate

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum go.work ./
COPY wire/go.mod wire/
COPY segment/go.mod segment/go.sum segment/
COPY client/go.mod client/go.sum client/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/idmint ./cmd/idmint

# A static binary needs nothing else: no shell, no libc, no CA certificates
# (idmint only talks to PostgreSQL, with sslmode as the URL says).
FROM scratch
COPY --from=build /out/idmint /idmint
USER 65532:65532
EXPOSE 8080 50051
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["/idmint", "healthcheck"]
ENTRYPOINT ["/idmint"]
CMD ["serve"]
