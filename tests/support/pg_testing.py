"""A private PostgreSQL server for tests: Debian's binaries, ``initdb`` + ``pg_ctl`` in a temp dir, a free port.

Started as the ``postgres`` user when the tests run as root (PostgreSQL refuses to run as root), as the current
user otherwise. Trust authentication on 127.0.0.1 only; stopped (``pg_ctl stop -m immediate``) and removed by
:meth:`PostgresServer.stop`.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def postgres_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb`` (Debian's layout), or None."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(dirs[-1]).parent if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A private server; ``settings`` are extra server settings (``-c name=value``), e.g.
    ``{"wal_level": "logical"}`` for logical decoding."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.settings = dict(settings or {})
        bindir = postgres_bin_dir()
        if bindir is None:
            raise RuntimeError(
                "PostgreSQL is not installed: run .ci/ensure_system_deps.sh (apt-get install postgresql)"
            )
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="kts-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._prefix = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self._prefix, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> PostgresServer:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} -c fsync=off"
        opts += "".join(f" -c {k}={v}" for k, v in self.settings.items())
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-o", opts, "-w", "start"
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return self

    @property
    def url(self) -> str:
        """A SQLAlchemy URL for psycopg2."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [*self._prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)
