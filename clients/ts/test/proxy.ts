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
      down.on("data", (d) => {
        asked = true;
        up.write(d);
      });
      let chunks = 0;
      up.on("data", (d) => {
        chunks++;
        // The first chunk is HTTP/2's SETTINGS, sent before any request.
        const unlucky = chunks > 1 && self.share > 0 && Math.random() < self.share;
        if ((asked && self.armed > 0) || unlucky) {
          if (!unlucky) self.armed--;
          self.drops++;
          down.resetAndDestroy();
          up.destroy();
          return;
        }
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
