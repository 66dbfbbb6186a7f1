// The parts of the client that need no server: how an answer is
// classified, the step policy, request identities.

import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { fromConnect, notSent } from "../src/errors.js";
import { ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { holderKey, uuidv7 } from "../src/ids.js";
import { nextStep } from "../src/step.js";

function answer(code: Code, reason?: string, retrySeconds?: number): ConnectError {
  const details = [];
  if (reason !== undefined) {
    details.push({ desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, domain: "idmint", metadata: { request_id: "r-1" } }) });
  }
  if (retrySeconds !== undefined) {
    details.push({ desc: RetryInfoSchema, value: create(RetryInfoSchema, { retryDelay: create(DurationSchema, { seconds: BigInt(retrySeconds) }) }) });
  }
  return new ConnectError("the instance's message", code, undefined, details);
}

test("fromConnect: what the client does with each answer", () => {
  const cases: { name: string; err: unknown; code: string; disposition: string }[] = [
    { name: "unknown tag", err: answer(Code.NotFound, "unknown_tag"), code: "unknown_tag", disposition: "final" },
    { name: "bad request", err: answer(Code.InvalidArgument, "invalid_holder_key"), code: "invalid_holder_key", disposition: "final" },
    { name: "no token", err: answer(Code.Unauthenticated, "unauthorized"), code: "unauthorized", disposition: "final" },
    { name: "scope", err: answer(Code.PermissionDenied, "forbidden"), code: "forbidden", disposition: "final" },
    { name: "another holder's request", err: answer(Code.PermissionDenied, "not_holder"), code: "not_holder", disposition: "not_ours" },
    { name: "given back in full", err: answer(Code.FailedPrecondition, "given_back"), code: "given_back", disposition: "not_ours" },
    { name: "another tag's request", err: answer(Code.FailedPrecondition, "request_conflict"), code: "request_conflict", disposition: "not_ours" },
    { name: "rolled back", err: answer(Code.Unavailable, "rolled_back"), code: "rolled_back", disposition: "refused" },
    { name: "exhausted", err: answer(Code.Unavailable, "tag_exhausted"), code: "tag_exhausted", disposition: "refused" },
    { name: "store down", err: answer(Code.Unavailable, "unavailable", 1), code: "unavailable", disposition: "retry" },
    { name: "rate limited", err: answer(Code.ResourceExhausted, "rate_limited", 2), code: "rate_limited", disposition: "retry" },
    { name: "too large", err: answer(Code.ResourceExhausted, "body_too_large"), code: "body_too_large", disposition: "final" },
    { name: "internal", err: answer(Code.Internal, "internal"), code: "internal", disposition: "retry" },
    { name: "reset connection", err: new ConnectError("socket hang up", Code.Aborted), code: "transport", disposition: "retry" },
    { name: "deadline", err: new ConnectError("deadline", Code.DeadlineExceeded), code: "transport", disposition: "retry" },
    { name: "a proxy's 404", err: new ConnectError("HTTP 404", Code.NotFound), code: "not_found", disposition: "final" },
    { name: "not an error of connect", err: new Error("boom"), code: "transport", disposition: "retry" },
  ];
  for (const c of cases) {
    const e = fromConnect(c.err, "http://i:8080", "order");
    assert.equal(e.code, c.code, c.name);
    assert.equal(e.disposition, c.disposition, c.name);
    assert.equal(e.final, c.disposition === "final", c.name);
    assert.equal(e.tag, "order", c.name);
    assert.match(e.message, /http:\/\/i:8080/, c.name);
  }
  const limited = fromConnect(answer(Code.ResourceExhausted, "rate_limited", 2), "u", "order");
  assert.equal(limited.retryAfterMs, 2000);
  assert.equal(limited.serverRequestId, "r-1");
});

test("notSent: only a refused connection or an instance shutting down", () => {
  const refused = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
  assert.equal(notSent(fromConnect(new ConnectError("x", Code.Unavailable, undefined, undefined, refused), "u", "t")), true);
  assert.equal(notSent(fromConnect(answer(Code.Unavailable, "shutting_down", 1), "u", "t")), true);
  const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
  assert.equal(notSent(fromConnect(new ConnectError("x", Code.Aborted, undefined, undefined, reset), "u", "t")), false);
});

test("nextStep follows the rate within the tag's bounds", () => {
  const period = 60_000;
  const cases = [
    // 1000 IDs/s for a 60 s period wants 60,000; growth caps it at 4×.
    { name: "grows at most 4x", last: 1000, s: { used: 1000, elapsedMs: 1000, latencyMs: 0, starved: false }, min: 100, max: 0, want: 4000 },
    { name: "16x when callers waited", last: 1000, s: { used: 1000, elapsedMs: 1000, latencyMs: 0, starved: true }, min: 100, max: 0, want: 16000 },
    { name: "bounded by max_step", last: 1000, s: { used: 1000, elapsedMs: 1000, latencyMs: 0, starved: true }, min: 100, max: 5000, want: 5000 },
    { name: "halves when idle", last: 1000, s: { used: 0, elapsedMs: 1000, latencyMs: 0, starved: false }, min: 100, max: 0, want: 500 },
    { name: "never below the step", last: 150, s: { used: 0, elapsedMs: 1000, latencyMs: 0, starved: false }, min: 100, max: 0, want: 100 },
    { name: "the rate's period", last: 1000, s: { used: 10, elapsedMs: 1000, latencyMs: 0, starved: false }, min: 100, max: 0, want: 600 },
    { name: "default max_step", last: 900_000, s: { used: 1e6, elapsedMs: 1, latencyMs: 0, starved: false }, min: 1, max: 0, want: 1_000_000 },
  ];
  for (const c of cases) {
    assert.equal(nextStep(c.last, c.s, c.min, c.max, period), c.want, c.name);
  }
});

test("uuidv7 and holderKey: the forms the server takes", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const id = uuidv7(0x0123456789ab);
    assert.match(id, /^01234567-89ab-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    seen.add(id);
    assert.match(holderKey(), /^[A-Za-z0-9_-]{43}$/);
  }
  assert.equal(seen.size, 1000);
});
