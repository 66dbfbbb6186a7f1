// The browser-safe entry: the client over Connect transports the caller
// makes (e.g. @connectrpc/connect-web's createConnectTransport, which
// speaks the Connect protocol over fetch). Nothing here imports Node.

import type { Transport } from "@connectrpc/connect";
import { checkRegions, Client, type Options } from "./client.js";
import { ClientCode, IdmintError } from "./errors.js";

export { Client, type LiveProbe, type Options, type Stats } from "./client.js";
export type { RegionStats } from "./region.js";
export type { Logger, TagStats } from "./buffer.js";
export type { Range } from "./granter.js";
export { ClientCode, ERROR_DOMAIN, IdmintError, isUnavailable, SharesOverlapError, type Disposition } from "./errors.js";

/** Options of createClient over transports the caller made. */
export interface TransportOptions extends Options {
  /**
   * One transport per instance, with the URL it is named by in errors. A
   * transport is asked for the IDs of every tag; each range request goes to
   * the instance that answered last, then to the next.
   */
  transports?: { url: string; transport: Transport }[];
  /**
   * The regions, home first, each with its instances' transports, instead
   * of transports (see NodeOptions.regions). Home is probed with fetch.
   */
  regions?: { name: string; transports: { url: string; transport: Transport }[] }[];
}

/** createClient returns a client of the instances behind opts.transports. */
export function createClient(opts: TransportOptions): Client {
  if (opts.transports !== undefined && opts.regions !== undefined) {
    throw new IdmintError(ClientCode.BadArgument, "idmint client: transports and regions are both set: give the transports as one of the regions");
  }
  if (opts.regions !== undefined) {
    checkRegions(opts.regions.map((r) => ({ name: r.name, count: r.transports.length })));
    return new Client(opts.regions.map((r) => ({ name: r.name, endpoints: r.transports })), opts);
  }
  return new Client(opts.transports ?? [], opts);
}
