"""A real `idmint serve` on a SQLite file for the client's tests.

The binary is built once per test run from the repository
(`go build ./cmd/idmint`), or taken from $IDMINT_BIN.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

_bin: str | None = None
_bin_dir: str | None = None


def binary() -> str:
    """Returns the idmint binary, building it on first use."""
    global _bin, _bin_dir
    if _bin is None:
        if os.environ.get("IDMINT_BIN"):
            _bin = os.environ["IDMINT_BIN"]
        else:
            _bin_dir = tempfile.mkdtemp(prefix="idmint-py-bin-")
            _bin = os.path.join(_bin_dir, "idmint")
            subprocess.run(["go", "build", "-o", _bin, "./cmd/idmint"], cwd=REPO, check=True)
    return _bin


def cleanup_binary() -> None:
    if _bin_dir:
        shutil.rmtree(_bin_dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """An idmint serve process with its own database, tags and tokens."""

    def __init__(self, auth: str = "token", tls: bool = False, tokens: dict[str, str] | None = None,
                 extra: list[str] | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="idmint-py-")
        self.db = "sqlite://" + os.path.join(self.dir, "idmint.db")
        self.run("migrate")
        # Tokens made before serve starts: a token made in the database
        # reaches a running instance only within a second.
        self.admin = self.token("admin", "admin")
        self.tokens = {name: self.token(name, scope) for name, scope in (tokens or {}).items()}
        self.port = free_port()
        args = ["serve", "--listen", f"127.0.0.1:{self.port}", "--auth", auth,
                "--log-format", "json", "--prune-after", "0", "--grpc-listen", "off", *(extra or [])]
        self.certs = None
        if tls:
            self.certs = os.path.join(self.dir, "certs")
            self.run("dev-certs", "--dir", self.certs, db=False)
            args += ["--tls-cert", self.cert("server.pem"), "--tls-key", self.cert("server-key.pem"),
                     "--tls-client-ca", self.cert("ca.pem")]
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "serve.log"), "wb")
        self.proc = subprocess.Popen([binary(), *args, "--database-url", self.db],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self._wait()

    def cert(self, name: str) -> str:
        assert self.certs
        return os.path.join(self.certs, name)

    def run(self, *args: str, db: bool = True) -> str:
        cmd = [binary(), *args] + (["--database-url", self.db] if db else [])
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()

    def tag(self, name: str, step: int, max_step: int = 0) -> None:
        self.run("tag", "create", name, "--step", str(step), "--max-step", str(max_step))

    def token(self, name: str, scope: str) -> str:
        return self.run("token", "create", "--name", name, "--scope", scope)

    def max_id(self, tag: str) -> int:
        """The tag's max_id, read from the admin API."""
        return int(self.get(f"/v1/tags/{tag}", self.admin)["max_id"])

    def get(self, path: str, token: str | None = None) -> dict:
        req = urllib.request.Request(self.url + path)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        ctx = None
        if self.certs:
            import ssl
            ctx = ssl.create_default_context(cafile=self.cert("ca.pem"))
            ctx.load_cert_chain(self.cert("client.pem"), self.cert("client-key.pem"))
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            return json.load(resp)

    def _wait(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"idmint serve exited {self.proc.returncode}: {self.logtail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("idmint serve did not listen within 30 s: " + self.logtail())

    def logtail(self) -> str:
        with open(os.path.join(self.dir, "serve.log"), "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
