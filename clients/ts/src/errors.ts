// Errors of the idmint client, and the one place where an instance's answer
// is classified: what the client does next with the request that got it.

import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** The domain of the google.rpc.ErrorInfo of every idmint error. */
export const ERROR_DOMAIN = "idmint";

/**
 * Codes of the client's own errors, beside the instances' stable codes
 * (docs/errors.md: "unknown_tag", "unauthorized", "forbidden", …), which
 * IdmintError.code carries as the instance sent them.
 */
export const ClientCode = {
  /** Both ranges of the tag are empty and no instance granted one in time. */
  Unavailable: "unavailable",
  /** The client was closed. */
  Closed: "closed",
  /** A granted range starts at or below an ID already granted here. */
  RolledBack: "rolled_back",
  /** The call was given arguments it cannot take (a count below 1). */
  BadArgument: "bad_argument",
  /** An instance's reply did not carry idmint's error code (a proxy's, say). */
  Transport: "transport",
  /**
   * Two regions' shares may overlap (or a region answered with another's
   * share, or none): the client hands out no ID from then on; final, never
   * worth a retry (SharesOverlapError).
   */
  SharesOverlap: "shares_overlap",
} as const;

/**
 * What the client does with a request after an answer:
 * - "final": the caller's answer as it is; asking again, here or on another
 *   instance, cannot change it (a bad request, the token, its scopes, an
 *   unknown tag);
 * - "not_ours": the request ID is settled with no range for this client
 *   (another holder's, another tag's, given back in full): the load goes on
 *   with a new request ID;
 * - "refused": nothing was granted and the tag cannot grant now (rolled
 *   back, exhausted): the load fails, the buffer backs off;
 * - "retry": anything else, a transport error included: the answer may hide
 *   a grant, so the same request ID is sent again, to any instance.
 */
export type Disposition = "final" | "not_ours" | "refused" | "retry";

/**
 * IdmintError is every error the client returns. `code` is the instance's
 * stable code (the ErrorInfo reason of domain "idmint": match on it, never
 * on the message) or one of ClientCode.
 */
export class IdmintError extends Error {
  override name = "IdmintError";
  /** The stable code: an instance's ("unknown_tag", …) or a ClientCode. */
  readonly code: string;
  /** The Connect code of the instance's answer, when there was one. */
  readonly connectCode: Code | undefined;
  /** The tag of the call. */
  readonly tag: string | undefined;
  /** The instance that answered, when one did. */
  readonly url: string | undefined;
  /** How long the instance asked to wait (RetryInfo), in milliseconds. */
  readonly retryAfterMs: number | undefined;
  /** The request ID the instance logged the error under (ErrorInfo metadata). */
  readonly serverRequestId: string | undefined;
  /** What the client did with the request (see Disposition). */
  readonly disposition: Disposition;
  /**
   * The IDs nextN took before the error (maybe none): unique like any
   * others; a caller that needs all or nothing drops them (a gap).
   */
  ids: bigint[] | undefined;

  constructor(
    code: string,
    message: string,
    opts: {
      connectCode?: Code;
      tag?: string;
      url?: string;
      retryAfterMs?: number;
      serverRequestId?: string;
      disposition?: Disposition;
      cause?: unknown;
    } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.connectCode = opts.connectCode;
    this.tag = opts.tag;
    this.url = opts.url;
    this.retryAfterMs = opts.retryAfterMs;
    this.serverRequestId = opts.serverRequestId;
    this.disposition = opts.disposition ?? "final";
  }

  /**
   * final reports whether asking again cannot help: the refusals
   * (invalid_argument, unauthenticated, permission_denied, not_found, …)
   * and a closed client. An unavailable error is not final: it is worth a
   * retry after a pause (the client already tried every instance).
   */
  get final(): boolean {
    return this.disposition === "final";
  }
}

/**
 * SharesOverlapError means that two of the client's regions sent shares of
 * the ID space that may overlap, or that a region's reply came from a
 * database of another region or of none: the client may have been given the
 * same ID by two regions. It hands out no ID from then on (a gap, never a
 * duplicate) and every call rejects with this error; it is final, not
 * "unavailable": the deployment's shares must be fixed (docs/regions.md).
 */
export class SharesOverlapError extends IdmintError {
  override name = "SharesOverlapError";
  constructor(message: string, cause?: unknown) {
    super(ClientCode.SharesOverlap, `the regions' shares may overlap: the client hands out no more ids: ${message}`, { disposition: "final", cause });
  }
}

/** isUnavailable reports whether err says: no ID in time, worth a retry later. */
export function isUnavailable(err: unknown): boolean {
  return err instanceof IdmintError && !err.final;
}

// Connect codes whose answer is the caller's as it is (a 4xx other than
// 408 and 429 over HTTP). ResourceExhausted (a rate limit) and the rest
// are retried under the same request ID.
const finalCodes = new Set<Code>([
  Code.InvalidArgument,
  Code.Unauthenticated,
  Code.PermissionDenied,
  Code.NotFound,
  Code.FailedPrecondition,
  Code.AlreadyExists,
  Code.Unimplemented,
  Code.OutOfRange,
]);

// Reasons that settle a request ID with no range for this client.
const notOursReasons = new Set(["not_holder", "request_conflict", "given_back"]);
// Reasons of a tag that cannot grant: nothing granted, no other instance
// would grant either.
const refusedReasons = new Set(["rolled_back", "tag_exhausted"]);
// ResourceExhausted reasons about the request itself (never sent by this
// client): final.
const tooLargeReasons = new Set(["body_too_large", "query_too_long"]);

/** The lower-case name of a Connect code ("not_found"), as in Connect's JSON. */
export function codeName(code: Code): string {
  return (Code[code] ?? "unknown").replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/**
 * fromConnect turns an error of a call to url into an IdmintError with the
 * instance's code (ErrorInfo reason of domain "idmint"), its RetryInfo and
 * its disposition. An error without ErrorInfo (a transport error: reset
 * connection, timeout, a proxy's answer) is "retry" unless its Connect code
 * is final.
 */
export function fromConnect(err: unknown, url: string, tag: string): IdmintError {
  const ce = ConnectError.from(err);
  let reason: string | undefined;
  let serverRequestId: string | undefined;
  let retryAfterMs: number | undefined;
  for (const info of ce.findDetails(ErrorInfoSchema)) {
    if (info.domain === ERROR_DOMAIN) {
      reason = info.reason;
      serverRequestId = info.metadata["request_id"];
      break;
    }
  }
  for (const ri of ce.findDetails(RetryInfoSchema)) {
    if (ri.retryDelay) {
      retryAfterMs = Number(ri.retryDelay.seconds) * 1000 + Math.floor(ri.retryDelay.nanos / 1e6);
    }
  }
  let disposition: Disposition;
  if (reason !== undefined && notOursReasons.has(reason)) {
    disposition = "not_ours";
  } else if (reason !== undefined && refusedReasons.has(reason)) {
    disposition = "refused";
  } else if (reason !== undefined && ce.code === Code.ResourceExhausted && tooLargeReasons.has(reason)) {
    disposition = "final";
  } else if (finalCodes.has(ce.code)) {
    disposition = "final";
  } else {
    disposition = "retry";
  }
  const code = reason ?? (disposition === "retry" ? ClientCode.Transport : codeName(ce.code));
  const msg = ce.rawMessage.includes(JSON.stringify(tag)) ? ce.rawMessage : `biz_tag ${JSON.stringify(tag)}: ${ce.rawMessage}`;
  return new IdmintError(code, `idmint ${url}: ${codeName(ce.code)} ${code}: ${msg}`, {
    connectCode: ce.code,
    tag,
    url,
    retryAfterMs,
    serverRequestId,
    disposition,
    cause: err,
  });
}

/** notSent reports whether err certainly never reached the instance (refused connection). */
export function notSent(err: IdmintError): boolean {
  if (err.code === "shutting_down") {
    return true;
  }
  const seen = new Set<unknown>();
  for (let e: unknown = err.cause; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if ((e as { code?: unknown }).code === "ECONNREFUSED") {
      return true;
    }
  }
  return false;
}
