// Package starvetest runs many callers on one starved tag, a tag whose
// ranges are so small that nearly every call waits for the next one, and
// checks that waiting callers are served in turn from the ranges that
// arrive: none fails while ranges keep arriving, none waits through more
// ranges than the callers queued before it can take, and no ID is handed
// out twice.
package starvetest
