// A TCP proxy that forwards both ways and, when armed, loses one reply:
// the first bytes the server sends back after a request (its reply, sent
// once the grant committed) are dropped and both connections reset, as a
// network that fails at the worst moment would (dropReplies: for
// HTTP/1.1, where the server sends nothing but replies), or resets a share
// of whatever the server sends (resetShare).

import { createServer, connect, type Server, type Socket } from "node:net";

export class LossyProxy {
  /** Replies dropped so far. */
  drops = 0;
  /** The request IDs (UUIDv7s) of the requests whose replies loseAll dropped. */
  readonly lostIds = new Set<string>();
  private losingAll = false;
  private armed = 0;
  private share = 0;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static start(targetPort: number): Promise<LossyProxy> {
    let self: LossyProxy;
    const server = createServer((down) => {
      const up = connect(targetPort, "127.0.0.1");
      self.sockets.add(down).add(up);
      let asked = false;
      let request = "";
      down.on("data", (d) => {
        asked = true;
        request = (request + d.toString("latin1")).slice(-8192);
        up.write(d);
      });
      let chunks = 0;
      up.on("data", (d) => {
        chunks++;
        // The first chunk is HTTP/2's SETTINGS, sent before any request.
        const unlucky = chunks > 1 && self.share > 0 && Math.random() < self.share;
        if (self.losingAll) {
          for (const m of request.matchAll(/[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}/g)) {
            self.lostIds.add(m[0]);
          }
          self.drops++;
          down.resetAndDestroy();
          up.destroy();
          return;
        }
        if ((asked && self.armed > 0) || unlucky) {
          if (!unlucky) self.armed--;
          self.drops++;
          down.resetAndDestroy();
          up.destroy();
          return;
        }
        // A reply passed: the next request's bytes start afresh.
        request = "";
        down.write(d);
      });
      const end = () => {
        down.destroy();
        up.destroy();
        self.sockets.delete(down);
        self.sockets.delete(up);
      };
      down.on("close", end).on("error", end);
      up.on("close", end).on("error", end);
    });
    return new Promise((resolve) => {
      server.listen(0, "127.0.0.1", () => {
        self = new LossyProxy(server, `http://127.0.0.1:${(server.address() as { port: number }).port}`);
        resolve(self);
      });
    });
  }

  /** dropReplies arms the proxy to lose the next n replies. */
  dropReplies(n = 1): void {
    this.armed += n;
  }

  /**
   * loseAll makes the proxy drop every reply from now on (on) or none
   * (off): the requests reach the server, which commits them; the client
   * never hears back. For HTTP/1.1.
   */
  loseAll(on: boolean): void {
    this.losingAll = on;
  }

  /**
   * resetShare makes the proxy reset, from now on, that share (0 to 1) of
   * the chunks the server sends (all but a connection's first): over
   * HTTP/2 a reply, a SETTINGS ack or a PING, whichever comes.
   */
  resetShare(share: number): void {
    this.share = share;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}
