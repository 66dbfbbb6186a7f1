package tracing

import (
	"context"
	"errors"
	"net/http"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/wire"
)

// The attributes a span may carry: every one a span gets is made by a
// function of this file, from a value that is no secret.
const (
	keyMethod     = attribute.Key("http.request.method")
	keyRoute      = attribute.Key("http.route")
	keyStatus     = attribute.Key("http.response.status_code")
	keyRPCSystem  = attribute.Key("rpc.system")
	keyRPCService = attribute.Key("rpc.service")
	keyRPCMethod  = attribute.Key("rpc.method")
	keyGRPCCode   = attribute.Key("rpc.grpc.status_code")
	keyTag        = attribute.Key("idmint.biz_tag")
	keyRequestID  = attribute.Key("idmint.request_id")
	keyHeldBy     = attribute.Key("idmint.held_by")
	keySize       = attribute.Key("idmint.size")
	keyFirst      = attribute.Key("idmint.first")
	keyLast       = attribute.Key("idmint.last")
	keyGivenBack  = attribute.Key("idmint.given_back")
	keyRepaired   = attribute.Key("idmint.repaired")
	keyWorker     = attribute.Key("idmint.worker_id")
	keyEpoch      = attribute.Key("idmint.epoch")
	keyOutcome    = attribute.Key("idmint.outcome")
)

// methodOf is an HTTP method as an attribute value: one of the methods
// HTTP defines, else "_OTHER" (a request can send any token).
func methodOf(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// heldBy says whose a grant is, and nothing of who: the principal and the
// holder key's hash stay out of the trace.
func heldBy(h allocator.Holder) attribute.KeyValue {
	if h.IsZero() {
		return keyHeldBy.String("instance")
	}
	return keyHeldBy.String("caller")
}

func requestID(id uuid.UUID) attribute.KeyValue { return keyRequestID.String(id.String()) }

// outcomeOf is the class of a store's error, the one thing of it a span
// tells: its text may carry the database's host, user or name.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, allocator.ErrAlreadyGranted):
		return "already_granted"
	case errors.Is(err, allocator.ErrNotFound):
		return "not_found"
	case errors.Is(err, allocator.ErrGivenBack):
		return wire.CodeGivenBack
	case errors.Is(err, allocator.ErrNotHolder):
		return wire.CodeNotHolder
	case errors.Is(err, allocator.ErrNotReplicated):
		return "not_replicated"
	case errors.Is(err, allocator.ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, allocator.ErrUnknownTag):
		return wire.CodeUnknownTag
	case errors.Is(err, allocator.ErrExhausted):
		return wire.CodeExhausted
	case errors.Is(err, allocator.ErrFloorBudget):
		return "floor_budget"
	case errors.Is(err, snowflake.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, snowflake.ErrAllHeld):
		return "all_held"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}
