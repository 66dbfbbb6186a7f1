// The Node entry: createClient makes one Connect transport per instance
// with @connectrpc/connect-node, over HTTP/2 (h2c on http://, TLS on
// https://, with a CA and a client certificate) or HTTP/1.1.

import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { checkRegions, Client, type Options } from "./client.js";
import { ClientCode, IdmintError } from "./errors.js";
import type { Endpoint } from "./granter.js";

export * from "./web.js";
export { createClient as createClientWithTransports } from "./web.js";

/** PEM text, or (a string without "-----BEGIN") the path of a PEM file. */
export type Pem = string | Uint8Array;

/** A region of the deployment: its name and its instances' base URLs. */
export interface RegionURLs {
  name: string;
  /** An array, or one string with the URLs separated by commas. */
  urls: string[] | string;
}

/** Options of createClient in Node. */
export interface NodeOptions extends Options {
  /**
   * Base URLs of the instances ("http://host:8080", "https://host:8443"):
   * an array, or one string with the URLs separated by commas. They are
   * one region, without a name; give regions instead for several.
   */
  urls?: string[] | string;
  /**
   * The regions of a deployment whose databases own disjoint shares of
   * every tag's ID space, in order of preference: the first is home. The
   * client serves from one at a time, moves to the next when it cannot
   * grant within the wait, and returns home once home grants again; each
   * needs a name and URLs. Not with urls.
   */
  regions?: RegionURLs[];
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
  if (opts.urls !== undefined && opts.regions !== undefined) {
    throw new IdmintError(ClientCode.BadArgument, "idmint client: urls and regions are both set: give the URLs as one of the regions");
  }
  const regions = (opts.regions ?? []).map((r) => ({ name: r.name, urls: parseURLs(r.urls) }));
  if (opts.regions !== undefined) {
    checkRegions(regions.map((r) => ({ name: r.name, count: r.urls.length })));
  }
  if ((opts.cert === undefined) !== (opts.key === undefined)) {
    throw new IdmintError(ClientCode.BadArgument, "idmint client: give both the client certificate and its key");
  }
  const tls = { ca: pem(opts.ca), cert: pem(opts.cert), key: pem(opts.key) };
  const closers: (() => void)[] = [];
  const endpoint = (url: string): Endpoint => {
    const secure = url.startsWith("https:");
    if (opts.httpVersion === "1.1") {
      const agent = secure ? new https.Agent({ keepAlive: true, ...tls }) : new http.Agent({ keepAlive: true });
      closers.push(() => agent.destroy());
      return { url, transport: createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: true, nodeOptions: { agent } }) };
    }
    const sessionManager = new Http2SessionManager(url, {}, secure ? tls : {});
    closers.push(() => sessionManager.abort());
    return { url, transport: createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: true, sessionManager }) };
  };
  // live probes home with the instances' TLS settings (GET /id/live).
  const live = (url: string, timeoutMs: number): Promise<boolean> =>
    new Promise((resolve) => {
      const get = url.startsWith("https:") ? https.get : http.get;
      const req = get(`${url}/id/live`, { ...tls, agent: false, timeout: timeoutMs }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      req.on("timeout", () => req.destroy());
      req.on("error", () => resolve(false));
    });
  const release = () => closers.forEach((c) => c());
  if (opts.regions !== undefined) {
    return new Client(regions.map((r) => ({ name: r.name, endpoints: r.urls.map(endpoint) })), opts, release, live);
  }
  return new Client(parseURLs(opts.urls ?? []).map(endpoint), opts, release, live);
}
