// The browser-safe entry: the client over Connect transports the caller
// makes (e.g. @connectrpc/connect-web's createConnectTransport, which
// speaks the Connect protocol over fetch). Nothing here imports Node.

import type { Transport } from "@connectrpc/connect";
import { Client, type Options } from "./client.js";

export { Client, type Options, type Stats } from "./client.js";
export type { Logger, TagStats } from "./buffer.js";
export type { Range } from "./granter.js";
export { ClientCode, ERROR_DOMAIN, IdmintError, isUnavailable, type Disposition } from "./errors.js";

/** Options of createClient over transports the caller made. */
export interface TransportOptions extends Options {
  /**
   * One transport per instance, with the URL it is named by in errors. A
   * transport is asked for the IDs of every tag; each range request goes to
   * the instance that answered last, then to the next.
   */
  transports: { url: string; transport: Transport }[];
}

/** createClient returns a client of the instances behind opts.transports. */
export function createClient(opts: TransportOptions): Client {
  return new Client(opts.transports, opts);
}
