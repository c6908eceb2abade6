"""A throwaway PostgreSQL cluster on loopback, for tests and benches.

`initdb` refuses to run as root, so as root the cluster is made and run by an unprivileged
user (`nobody` unless told otherwise), in a directory of its own that is removed after.
It listens on 127.0.0.1 only, with its socket in that directory, and trusts local
connections: nothing outside this machine can reach it, and it lives for one session.

    with throwaway_cluster() as cluster:
        url = cluster.new_database()   # postgresql+asyncpg://...
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gateway.serving import free_port

SUPERUSER = "gateway"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bin_dir() -> Path:
    configured = os.environ.get("GATEWAY_PG_BIN")
    candidates = [configured] if configured else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise PostgresUnavailable(
        "no PostgreSQL server found (initdb): install postgresql or set GATEWAY_PG_BIN"
    )


@dataclass
class Cluster:
    port: int
    bin_dir: Path
    home: Path
    run_as: str | None
    created: list[str] = field(default_factory=list)

    def url(self, database: str, driver: str = "asyncpg") -> str:
        return f"postgresql+{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str | None = None) -> str:
        """A fresh, empty database in the cluster; its async URL."""
        name = name or f"db_{len(self.created) + 1}_{os.getpid()}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, name)
        self.created.append(name)
        return self.url(name)

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.home, timeout=120)


@contextlib.contextmanager
def throwaway_cluster(*, durable: bool = False, user: str = "nobody") -> Iterator[Cluster]:
    """Start a cluster for the block. `durable=False` turns fsync off (tests: the cluster
    is thrown away anyway); a bench comparing stores keeps it on."""
    bin_dir = find_bin_dir()
    run_as = user if os.geteuid() == 0 else None
    home = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
    if run_as is not None:
        account = pwd.getpwnam(run_as)
        os.chown(home, account.pw_uid, account.pw_gid)
    home.chmod(0o700)
    cluster = Cluster(free_port(), bin_dir, home, run_as)
    data = home / "data"
    options = f"-c listen_addresses=127.0.0.1 -p {cluster.port} -k {home}"
    if not durable:
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    try:
        cluster._run(
            "initdb", "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync"
        )
        cluster._run(
            "pg_ctl", "-D", str(data), "-o", options, "-l", str(home / "log"), "-w", "start"
        )
        try:
            yield cluster
        finally:
            with contextlib.suppress(subprocess.SubprocessError):
                cluster._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)
