// The range protocol against an in-process SegmentService whose answers the
// tests choose (connect's router transport): what a real server does not
// do on demand — a rolled-back range, another holder's request, a load that
// gives up and is resumed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { createClientWithTransports, IdmintError } from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { SegmentService, type GrantRangeRequest } from "../src/gen/idmint/v1/segments_pb.js";

type Answer = { first: bigint; last: bigint } | ConnectError;

// fake returns a client of a SegmentService that answers each GrantRange
// with the next of answers (the last one again when they run out), and the
// requests it got.
function fake(answers: Answer[], opts: { loadTimeoutMs?: number; waitTimeoutMs?: number; minBackoffMs?: number; maxBackoffMs?: number } = {}) {
  const got: GrantRangeRequest[] = [];
  const transport = createRouterTransport(({ service }) => {
    service(SegmentService, {
      grantRange(req) {
        got.push(req);
        const a = answers[Math.min(got.length - 1, answers.length - 1)]!;
        if (a instanceof ConnectError) throw a;
        return { bizTag: req.bizTag, requestId: req.requestId, first: a.first, last: a.last, step: 10n };
      },
      giveBack(req) {
        return { bizTag: req.bizTag, requestId: req.requestId, first: req.first, last: req.last, givenBack: false };
      },
    });
  });
  const client = createClientWithTransports({
    transports: [{ url: "fake", transport }],
    retryMinMs: 1,
    retryMaxMs: 5,
    minBackoffMs: 1,
    maxBackoffMs: 5,
    ...opts,
  });
  return { client, got };
}

function refusal(code: Code, reason: string): ConnectError {
  return new ConnectError(reason, code, undefined, [{ desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, domain: "idmint" }) }]);
}

test("retries carry the same request ID and holder key; the floor is the highest ID granted", async () => {
  const down = new ConnectError("unreachable", Code.Unavailable);
  const { client, got } = fake([down, down, { first: 1n, last: 10n }, { first: 11n, last: 20n }]);
  assert.equal(await client.next("t"), 1n);
  assert.equal(got.length, 3);
  assert.equal(new Set(got.map((r) => r.requestId)).size, 1);
  assert.equal(new Set(got.map((r) => r.holderKey)).size, 1);
  assert.equal(got[0]!.floor, 0n);
  await client.nextN("t", 9);
  assert.equal(await client.next("t"), 11n);
  const next = got[3]!;
  assert.notEqual(next.requestId, got[0]!.requestId, "a new range, a new request ID");
  assert.notEqual(next.holderKey, got[0]!.holderKey);
  assert.equal(next.floor, 10n);
  await client.close();
});

test("a range at or below the floor is refused, never served", async () => {
  // A backoff long enough that the next call still finds the refusal.
  const { client } = fake([{ first: 1n, last: 10n }, { first: 5n, last: 14n }, { first: 21n, last: 30n }], { minBackoffMs: 300, maxBackoffMs: 300 });
  const ids = await client.nextN("t", 10);
  assert.deepEqual(ids, Array.from({ length: 10 }, (_, i) => BigInt(i + 1)));
  // The prefetched range [5, 14] overlaps what was granted: refused.
  const err = await client.next("t").then(
    () => assert.fail("a rolled-back range was served"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof IdmintError && err.code === "unavailable" && !err.final, `${err}`);
  assert.equal((err.cause as IdmintError).code, "rolled_back");
  const st = client.stats().tags[0]!;
  assert.equal(st.refused, 1);
  const until = Date.now() + 5000;
  let id: bigint | undefined;
  while (id === undefined && Date.now() < until) {
    id = await client.next("t").catch(() => new Promise<undefined>((r) => setTimeout(r, 10)));
  }
  assert.equal(id, 21n);
  await client.close();
});

test("a request ID settled without a range for this client is dropped for a new one", async () => {
  const { client, got } = fake([refusal(Code.PermissionDenied, "not_holder"), refusal(Code.FailedPrecondition, "given_back"), { first: 1n, last: 10n }]);
  assert.equal(await client.next("t"), 1n);
  assert.equal(got.length, 3);
  assert.equal(new Set(got.map((r) => r.requestId)).size, 3, "each answer settled its request: three request IDs");
  await client.close();
});

test("a load that gives up keeps its request, and the next load resumes it under the same ID", async () => {
  const down = new ConnectError("unreachable", Code.Unavailable);
  const answers: Answer[] = Array.from({ length: 1000 }, () => down);
  const { client, got } = fake(answers, { loadTimeoutMs: 50, waitTimeoutMs: 1000 });
  await assert.rejects(client.next("t"), (e: unknown) => e instanceof IdmintError && e.code === "unavailable");
  const first = got[0]!.requestId;
  assert.ok(got.every((r) => r.requestId === first));
  answers.length = got.length; // from now on: granted
  answers.push({ first: 1n, last: 10n });
  const until = Date.now() + 5000;
  let id: bigint | undefined;
  while (id === undefined && Date.now() < until) {
    id = await client.next("t").catch(() => new Promise<undefined>((r) => setTimeout(r, 10)));
  }
  assert.equal(id, 1n);
  assert.equal(got.at(-1)!.requestId, first, "resumed under the request ID of the load that gave up");
  await client.close();
});
