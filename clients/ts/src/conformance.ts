// The conformance program (clients/ts/conformance runs it): takes --count
// IDs of --tag from the instances at --url with --threads concurrent async
// loops on one client (one event loop: JavaScript's concurrency; worker
// threads would each need a client of their own), prints each ID on its
// own line to stdout, closes the client (giving back the unused tails) and
// exits 0 only if every call succeeded. A summary goes to stderr.

import { parseArgs } from "node:util";
import { createClient, IdmintError } from "./index.js";

const usage = `usage: conformance --url URL [--url URL | --url URL,URL] --tag TAG --count N [--threads N]
                   [--token TOKEN] [--ca FILE] [--cert FILE --key FILE]
Takes N IDs of TAG with --threads concurrent async loops on one client and prints one per line.
--token defaults to $IDMINT_TOKEN.`;

function fail(msg: string): never {
  process.stderr.write(`conformance: ${msg}\n${usage}\n`);
  process.exit(2);
}

function whole(name: string, v: string | undefined, dflt?: number): number {
  if (v === undefined) {
    if (dflt === undefined) {
      fail(`--${name} is required`);
    }
    return dflt;
  }
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 1) {
    fail(`--${name} ${JSON.stringify(v)}: want a whole number of at least 1`);
  }
  return n;
}

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        url: { type: "string", multiple: true },
        tag: { type: "string" },
        count: { type: "string" },
        threads: { type: "string" },
        token: { type: "string" },
        ca: { type: "string" },
        cert: { type: "string" },
        key: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (e) {
    fail((e as Error).message);
  }
  if (values.help) {
    process.stdout.write(usage + "\n");
    return 0;
  }
  if (!values.url || values.url.length === 0) {
    fail("--url is required");
  }
  const tag = values.tag ?? fail("--tag is required");
  const count = whole("count", values.count);
  const threads = whole("threads", values.threads, 1);
  if ((values.cert === undefined) !== (values.key === undefined)) {
    fail("give both --cert and --key");
  }
  const client = createClient({
    urls: values.url,
    token: values.token ?? process.env["IDMINT_TOKEN"],
    ca: values.ca,
    cert: values.cert,
    key: values.key,
    // A run goes through a lossy proxy and a killed instance: a caller
    // waits for the load, which retries every instance for up to 30 s.
    waitTimeoutMs: 30_000,
    loadTimeoutMs: 30_000,
    attemptTimeoutMs: 2_000,
    logger: { warn: (m, f) => process.stderr.write(`conformance: ${m} ${JSON.stringify(f, (_, v) => (typeof v === "bigint" ? v.toString() : v))}\n`) },
  });

  let out: string[] = [];
  let flushing: Promise<void> = Promise.resolve();
  const flush = () => {
    const chunk = out.join("\n") + "\n";
    out = [];
    flushing = flushing.then(
      () =>
        new Promise<void>((resolve, reject) => {
          process.stdout.write(chunk, (err) => (err ? reject(err) : resolve()));
        }),
    );
    return flushing;
  };

  let started = 0;
  let failed: unknown;
  const begin = performance.now();
  const loop = async () => {
    while (failed === undefined && started < count) {
      started++;
      let id: bigint;
      try {
        id = await client.next(tag);
      } catch (e) {
        failed ??= e;
        return;
      }
      // After the await: out may be a new array by now.
      out.push(id.toString());
      if (out.length >= 8192) {
        await flush();
      }
    }
  };
  await Promise.all(Array.from({ length: threads }, loop));
  const elapsed = (performance.now() - begin) / 1000;
  await flush();
  await client.close();
  const st = client.stats();
  const t = st.tags.find((x) => x.tag === tag);
  const done = t?.issued ?? 0;
  process.stderr.write(
    `conformance: ${done} ids of ${JSON.stringify(tag)} in ${elapsed.toFixed(3)}s (${Math.round(done / elapsed)} ids/s) from ${threads} async loops; ` +
      `${st.requests} range requests, ${t?.loads ?? 0} ranges (${t?.recovered ?? 0} recovered), ${t?.givenBack ?? 0} ids given back, ${t?.abandoned ?? 0} abandoned\n`,
  );
  if (failed !== undefined) {
    const e = failed as Error;
    process.stderr.write(`conformance: FAILED: ${e instanceof IdmintError ? `${e.code}: ` : ""}${e.message}\n`);
    return 1;
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`conformance: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
