"""A throwaway local PostgreSQL cluster (initdb, pg_ctl) for the regions
tests, and idmint regions on it: each region its own database, claimed
with `idmint region claim` before its tag is made, served by `idmint serve
--region NAME` processes that a test may SIGKILL and start again."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

from tests import server as srv

BLOCK = 1_000_000_000_000_000  # 10^15: a owns [1, 10^15], b the next 10^15
TAG = "order"


def pg_bin() -> str | None:
    """The directory of initdb, pg_ctl and postgres, or None."""
    cands = [os.environ.get("IDMINT_TEST_PG_BIN", "")]
    try:
        cands.append(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    cands += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for d in cands:
        if d and all(os.access(os.path.join(d, x), os.X_OK) for x in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


class Cluster:
    """One local PostgreSQL server on a free port; databases made on demand."""

    def __init__(self) -> None:
        self.bin = pg_bin()
        if self.bin is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl, postgres)")
        self.dir = tempfile.mkdtemp(prefix="idmint-py-pg-")
        self.user = None
        if os.geteuid() == 0:  # initdb refuses root
            self.user = "postgres"
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self._pg("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
        self.port = srv.free_port()
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.dir}'\n"
                    f"fsync = off\nmax_connections = 200\nport = {self.port}\n")
        self._pg("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "postgres.log"), "-w", "-t", "60", "start")
        self.dbs = 0

    def _pg(self, name: str, *args: str) -> None:
        subprocess.run([os.path.join(self.bin, name), *args], check=True, capture_output=True, cwd=self.dir,
                       user=self.user, env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"})

    def url(self, db: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}?sslmode=disable"

    def psql(self, db: str, sql: str) -> list[list[str]]:
        out = subprocess.run(["psql", "-X", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", self.url(db), "-c", sql],
                             check=True, capture_output=True, text=True).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def new_db(self) -> str:
        self.dbs += 1
        name = f"r{self.dbs}"
        self.psql("postgres", f"CREATE DATABASE {name}")
        return name

    def stop(self) -> None:
        try:
            self._pg("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "-t", "60", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Region:
    """A region: its own database on cluster, claimed as name of regions
    (blocks of BLOCK), with tag TAG (step 100, max 100), and n serve
    processes."""

    def __init__(self, cluster: Cluster, name: str, regions: str, n: int = 1) -> None:
        self.cluster, self.name = cluster, name
        self.db = cluster.new_db()
        self.dburl = cluster.url(self.db)
        self.dir = tempfile.mkdtemp(prefix=f"idmint-py-region-{name}-")
        self.run("migrate")
        self.run("region", "claim", "--name", name, "--regions", regions, "--block", str(BLOCK))
        self.run("tag", "create", TAG, "--step", "100", "--max-step", "100")
        self.ports = [srv.free_port() for _ in range(n)]
        self.procs: list[subprocess.Popen] = []
        self.runs = 0
        self.start()

    def run(self, *args: str) -> str:
        return subprocess.run([srv.binary(), *args, "--database-url", self.dburl],
                              check=True, capture_output=True, text=True).stdout.strip()

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def start(self) -> None:
        self.runs += 1
        self.procs = []
        for i, port in enumerate(self.ports):
            log = open(os.path.join(self.dir, f"serve-{i}-{self.runs}.log"), "wb")
            self.procs.append(subprocess.Popen(
                [srv.binary(), "serve", "--database-url", self.dburl, "--region", self.name,
                 "--listen", f"127.0.0.1:{port}", "--instance", f"{self.name}-{i}-{self.runs}", "--auth", "open",
                 "--grpc-listen", "off", "--log-format", "json", "--access-log=false", "--prune-after", "0"],
                stdout=log, stderr=subprocess.STDOUT))
            log.close()
        for port, p in zip(self.ports, self.procs):
            deadline = time.monotonic() + 30
            while True:
                if p.poll() is not None:
                    raise RuntimeError(f"region {self.name}: serve exited {p.returncode}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/id/live", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"region {self.name}: serve not live within 30 s")
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILLs every process of the region."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()

    def segment_log(self) -> dict[str, tuple[int, int]]:
        """The region's segment log: request ID -> [first, last]."""
        rows = self.cluster.psql(self.db, f"SELECT request_id, first_id, last_id FROM idmint_segments WHERE biz_tag = '{TAG}'")
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def region_of(i: int) -> str:
    """The region whose share holds id i (two regions, blocks of BLOCK)."""
    return "ab"[((i - 1) // BLOCK) % 2]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
