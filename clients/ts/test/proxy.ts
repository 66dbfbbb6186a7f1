// A TCP proxy that forwards both ways and, when armed, loses one reply:
// the first bytes the server sends back after a request (its reply, sent
// once the grant committed) are dropped and both connections reset, as a
// network that fails at the worst moment would. For HTTP/1.1, where the
// server sends nothing but replies.

import { createServer, connect, type Server, type Socket } from "node:net";

export class LossyProxy {
  /** Replies dropped so far. */
  drops = 0;
  private armed = 0;
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
      up.on("data", (d) => {
        if (asked && self.armed > 0) {
          self.armed--;
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

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}
