"""A tiny HTTP proxy that can lose a reply after the server committed.

Each connection carries one request (the client opens one per attempt). The
proxy forwards the request, reads the server's whole reply, and then either
passes it on or, when drop(request) says so, resets the client's connection
instead: the server did the work, the client never hears of it.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from typing import Callable


def _read_message(sock: socket.socket) -> bytes:
    """Reads one HTTP/1.1 message with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _request_id(message: bytes) -> str:
    """The request_id of a JSON request body, or ""."""
    try:
        rid = json.loads(message.partition(b"\r\n\r\n")[2]).get("request_id", "")
    except (ValueError, AttributeError):
        return ""
    return rid if isinstance(rid, str) else ""


class LossyProxy:
    """Listens on 127.0.0.1 and forwards to target (host, port)."""

    def __init__(self, target: tuple[str, int], drop: Callable[[bytes], bool]) -> None:
        self.target, self.drop = target, drop
        self.dropped = 0
        self._dropped_ids: set[str] = set()
        self._delivered_ids: set[str] = set()
        self._lock = threading.Lock()
        self._ls = socket.socket()
        self._ls.bind(("127.0.0.1", 0))
        self._ls.listen(16)
        self.url = "http://127.0.0.1:%d" % self._ls.getsockname()[1]
        self._th = threading.Thread(target=self._serve, daemon=True)
        self._th.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._ls.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            request = _read_message(conn)
            if not request:
                return
            try:
                with socket.create_connection(self.target) as up:
                    up.sendall(request)
                    reply = _read_message(up)
            except OSError:
                return  # the target is down: the client sees the connection closed
            rid = _request_id(request)
            with self._lock:
                lose = self.drop(request)
                if lose:
                    self.dropped += 1
                if rid:
                    (self._dropped_ids if lose else self._delivered_ids).add(rid)
            if lose:
                # SO_LINGER 0: close with a reset, as a dying network does.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            conn.sendall(reply)

    def lost_ids(self) -> set[str]:
        """The request IDs whose every reply was lost: the client never heard
        how they ended (one passed on, to a retry or a give-back, does not count)."""
        with self._lock:
            return self._dropped_ids - self._delivered_ids

    def close(self) -> None:
        self._ls.close()
