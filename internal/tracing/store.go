package tracing

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/snowflake"
)

// Store returns s with a span around each grant (Allocate), request-ID
// lookup (Lookup) and give-back (GiveBack, GiveBackRange): the child of
// the call that caused it (a request's own span, or the request that
// started a prefetch), a root span of its own for background work. The
// tags, token and Ping calls pass through untraced.
func (t *Tracing) Store(s allocator.Store) allocator.Store { return &store{Store: s, t: t} }

// store is Tracing.Store's decorator.
type store struct {
	allocator.Store
	t *Tracing
}

var _ allocator.Store = (*store)(nil)

func (s *store) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	ctx, span := s.t.tracer.Start(ctx, "idmint.store.allocate", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(keyTag.String(req.Tag), requestID(req.ID), heldBy(req.Holder), keySize.Int64(req.Size)))
	seg, err := s.Store.Allocate(ctx, req)
	if err == nil {
		span.SetAttributes(keyFirst.Int64(seg.First), keyLast.Int64(seg.Last), keyRepaired.Bool(seg.Repaired))
	}
	end(span, err)
	return seg, err
}

func (s *store) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	ctx, span := s.t.tracer.Start(ctx, "idmint.store.lookup", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(requestID(id)))
	seg, err := s.Store.Lookup(ctx, id)
	if err == nil {
		span.SetAttributes(keyTag.String(seg.Tag), heldBy(seg.Holder), keyFirst.Int64(seg.First), keyLast.Int64(seg.Last))
	}
	end(span, err)
	return seg, err
}

func (s *store) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	ctx, span := s.t.tracer.Start(ctx, "idmint.store.give_back", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(keyTag.String(tag), keyFirst.Int64(first), keyLast.Int64(last)))
	ok, err := s.Store.GiveBack(ctx, tag, first, last)
	span.SetAttributes(keyGivenBack.Bool(ok))
	end(span, err)
	return ok, err
}

func (s *store) GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error) {
	ctx, span := s.t.tracer.Start(ctx, "idmint.store.give_back_range", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(keyTag.String(tag), requestID(id), heldBy(h), keyFirst.Int64(first), keyLast.Int64(last)))
	ok, err := s.Store.GiveBackRange(ctx, id, h, tag, first, last)
	span.SetAttributes(keyGivenBack.Bool(ok))
	end(span, err)
	return ok, err
}

// end ends span with err's class (outcomeOf), never its text.
func end(span trace.Span, err error) {
	outcome := outcomeOf(err)
	span.SetAttributes(keyOutcome.String(outcome))
	if err != nil {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// Leases returns l with a root span for each lease acquisition, renewal
// and release of the Snowflake worker ID: the node renews in the
// background, so each renewal is a trace of its own.
func (t *Tracing) Leases(l snowflake.LeaseStore) snowflake.LeaseStore {
	return &leases{LeaseStore: l, t: t}
}

// leases is Tracing.Leases's decorator.
type leases struct {
	snowflake.LeaseStore
	t *Tracing
}

var _ snowflake.LeaseStore = (*leases)(nil)

func (l *leases) Acquire(ctx context.Context, req snowflake.AcquireRequest) (snowflake.Lease, error) {
	ctx, span := l.t.tracer.Start(ctx, "idmint.lease.acquire", trace.WithSpanKind(trace.SpanKindClient))
	got, err := l.LeaseStore.Acquire(ctx, req)
	if err == nil {
		span.SetAttributes(leaseAttrs(got)...)
	}
	end(span, err)
	return got, err
}

func (l *leases) Renew(ctx context.Context, held snowflake.Lease, ttl, margin time.Duration) (snowflake.Lease, error) {
	ctx, span := l.t.tracer.Start(ctx, "idmint.lease.renew", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithNewRoot(), trace.WithAttributes(leaseAttrs(held)...))
	got, err := l.LeaseStore.Renew(ctx, held, ttl, margin)
	end(span, err)
	return got, err
}

func (l *leases) Release(ctx context.Context, held snowflake.Lease, floor int64) error {
	ctx, span := l.t.tracer.Start(ctx, "idmint.lease.release", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(leaseAttrs(held)...))
	err := l.LeaseStore.Release(ctx, held, floor)
	end(span, err)
	return err
}

func leaseAttrs(l snowflake.Lease) []attribute.KeyValue {
	return []attribute.KeyValue{keyWorker.Int64(l.Worker), keyEpoch.Int64(l.Epoch)}
}
