"""A private PostgreSQL cluster for tests: Debian's initdb + pg_ctl in a temporary folder, on a port of our own."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

SUPERUSER = "kiln"
# Durability buys nothing in a throwaway cluster: without fsync a test database is made in milliseconds.
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "300"}


def postgres_bin(name: str) -> str | None:
    """`initdb`, `pg_ctl`...: on PATH, or where Debian keeps them (/usr/lib/postgresql/VERSION/bin, not on PATH)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[-3]))
    return candidates[-1] if candidates else None


class PostgresServer:
    """One cluster listening on `host:port`, trust authentication for SUPERUSER. initdb refuses to run as
    root, so as root the cluster belongs to Debian's `postgres` account (`runuser`). `prefix` runs the
    server elsewhere, e.g. `["ip", "netns", "exec", NAME]` for another network namespace."""

    def __init__(self, host: str, port: int, prefix: list[str] | None = None):
        if postgres_bin("initdb") is None:
            raise FileNotFoundError("PostgreSQL is not installed: run `make test` (it installs it) or "
                                    "apt-get install postgresql")
        self.owner = None
        if os.geteuid() == 0:
            try:
                self.owner = pwd.getpwnam("postgres")
            except KeyError:
                raise FileNotFoundError("initdb refuses to run as root and there is no `postgres` account: "
                                        "install Debian's postgresql package (it makes one)") from None
        self.host, self.port, self.prefix = host, port, list(prefix or [])
        self.folder = Path(tempfile.mkdtemp(prefix="kiln-pg-"))
        if self.owner is not None:
            os.chown(self.folder, self.owner.pw_uid, self.owner.pw_gid)
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"

    def _run(self, *command: str, timeout_s: float = 60) -> None:
        as_owner = ["runuser", "-u", "postgres", "--"] if self.owner is not None else []
        done = subprocess.run([*self.prefix, *as_owner, *command], capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(command[:2])} failed ({done.returncode}): {done.stderr}{done.stdout}\n{log}")

    def start(self) -> "PostgresServer":
        if not self.data.exists():
            self._run(postgres_bin("initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "--no-sync",
                      "-E", "UTF8", "--no-locale")
            with open(self.data / "pg_hba.conf", "a") as hba:  # initdb trusts loopback only: also our own subnet
                hba.write("host all all samenet trust\n")
        options = {"listen_addresses": self.host, "port": str(self.port), "unix_socket_directories": str(self.folder),
                   **FAST_SETTINGS}
        self._run(postgres_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o",
                  " ".join(f"-c {key}={value}" for key, value in options.items()), "start", timeout_s=90)
        return self

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(f"host={self.host} port={self.port} user={SUPERUSER} dbname=postgres",
                             autocommit=True) as connection:
            connection.execute(sql)

    def create_database(self, name: str | None = None, template: str | None = None) -> str:
        """A new, empty database (or a copy of `template`); answers its SQLAlchemy URL."""
        name = name or f"kiln_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
