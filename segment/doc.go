// Package segment holds one business tag's double buffer of ID ranges.
//
// A Buffer serves IDs from its current range with a single atomic add. Once a
// threshold of the current range has been used it asks its Loader, in the
// background, for the next range, sized by a StepPolicy so that one range lasts
// about a target period. When the current range runs dry the buffer switches to
// the next one under a short lock. Callers never spin: if both ranges are empty
// they wait a bounded time for the fetch in flight, then get ErrUnavailable.
//
// A Buffer never serves a range that starts at or below the highest ID it was
// ever granted (anti-rollback): such a range, from a restored backup or a
// lagging replica, is refused and counted, and the buffer keeps asking. A
// Loader that repaired a rollback (raised the high-water mark back to the
// floor) says so in its Grant, and the buffer counts it.
//
//	b := segment.New(segment.Config{Tag: "order", Loader: loader})
//	defer b.Close()
//	id, err := b.Take(ctx)
//
// A Set holds the buffers of many tags, fed by one Source that grants
// ranges idempotently by request ID. Each Ask (one request of a tag for a
// range) has its ID chosen before its first attempt and reused by every
// retry; a lost reply is looked up instead of asked again under a new ID;
// an ask whose outcome is unknown when its load gives up is resumed by the
// tag's next load; an ask settled without a range for the Set (another
// holder's) is never served, and the load goes on with a new one; tags the
// source does not know keep no buffer; Close gives back the unused tail of
// each tag's newest range. The allocator's Set is fed by its store, the
// client's by the range API:
//
//	s := segment.NewSet(segment.SetConfig{Source: source})
//	defer s.Close(ctx)
//	id, err := s.Next(ctx, "order")
//
// A Config.Runway (or a tag's, in its Grant) is how long the buffer must
// carry its callers without a load at the recent peak rate: every range
// asked for covers it within the tag's max_step, the next range is fetched
// while the current one still holds it, and Stats says when it falls short
// (RunwayMet, RunwayShort).
//
// The package knows nothing of SQL or HTTP: the allocator and client
// packages supply the Source.
package segment
