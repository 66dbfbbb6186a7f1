// The Node entry: createClient makes one Connect transport per instance
// with @connectrpc/connect-node, over HTTP/2 (h2c on http://, TLS on
// https://, with a CA and a client certificate) or HTTP/1.1.

import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { Client, type Options } from "./client.js";
import { ClientCode, IdmintError } from "./errors.js";
import type { Endpoint } from "./granter.js";

export * from "./web.js";
export { createClient as createClientWithTransports } from "./web.js";

/** PEM text, or (a string without "-----BEGIN") the path of a PEM file. */
export type Pem = string | Uint8Array;

/** Options of createClient in Node. */
export interface NodeOptions extends Options {
  /**
   * Base URLs of the instances ("http://host:8080", "https://host:8443"):
   * an array, or one string with the URLs separated by commas.
   */
  urls: string[] | string;
  /** CA bundle that signs the instances' certificates (default: Node's CAs). */
  ca?: Pem;
  /** Client certificate and its key, for instances serving --tls-client-ca. */
  cert?: Pem;
  key?: Pem;
  /** "2" (default: h2c on http://, HTTP/2 over TLS) or "1.1". */
  httpVersion?: "2" | "1.1";
}

function pem(v: Pem | undefined): string | Buffer | undefined {
  if (v === undefined || v instanceof Uint8Array) {
    return v === undefined ? undefined : Buffer.from(v);
  }
  return v.includes("-----BEGIN") ? v : readFileSync(v);
}

/** parseURLs splits, trims and checks instance URLs. */
export function parseURLs(urls: string[] | string): string[] {
  const list = (Array.isArray(urls) ? urls : [urls]).flatMap((u) => u.split(",")).map((u) => u.trim()).filter((u) => u !== "");
  for (const raw of list) {
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      throw new IdmintError(ClientCode.BadArgument, `idmint client: URL ${JSON.stringify(raw)}: want http(s)://host[:port]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new IdmintError(ClientCode.BadArgument, `idmint client: URL ${JSON.stringify(raw)}: want http(s)://host[:port]`);
    }
  }
  return list.map((u) => u.replace(/\/+$/, ""));
}

/**
 * createClient returns a client of the instances at opts.urls. It sends
 * nothing until the first next() (or ready()).
 */
export function createClient(opts: NodeOptions): Client {
  const urls = parseURLs(opts.urls);
  if ((opts.cert === undefined) !== (opts.key === undefined)) {
    throw new IdmintError(ClientCode.BadArgument, "idmint client: give both the client certificate and its key");
  }
  const tls = { ca: pem(opts.ca), cert: pem(opts.cert), key: pem(opts.key) };
  const closers: (() => void)[] = [];
  const endpoints: Endpoint[] = urls.map((url) => {
    const secure = url.startsWith("https:");
    if (opts.httpVersion === "1.1") {
      const agent = secure ? new https.Agent({ keepAlive: true, ...tls }) : new http.Agent({ keepAlive: true });
      closers.push(() => agent.destroy());
      return { url, transport: createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: true, nodeOptions: { agent } }) };
    }
    const sessionManager = new Http2SessionManager(url, {}, secure ? tls : {});
    closers.push(() => sessionManager.abort());
    return { url, transport: createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: true, sessionManager }) };
  });
  return new Client(endpoints, opts, () => closers.forEach((c) => c()));
}
