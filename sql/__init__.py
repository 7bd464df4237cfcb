"""The store's schema: numbered DDL migrations under ``migrations/`` and the ClickHouse adapter (store.py)."""
from __future__ import annotations

import hashlib
import os
import pickle
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from urllib.parse import urlsplit

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class StoreError(Exception):
    """A permanent store failure: bad SQL, bad data, a changed migration."""


class StoreMissing(StoreError):
    """The database (or the embedded store) named does not exist, or is not migrated: nothing is created."""


class StoreUnavailable(StoreError):
    """The store cannot be reached right now; retrying later may succeed."""


class StoreBusy(StoreUnavailable):
    """The embedded store is open in another process (one process at a time opens a chdb directory); ``holder``
    says which, as it recorded itself: pid, command, since, and the URL it serves on (``gpufleet serve``)."""

    def __init__(self, message: str, holder: dict | None = None):
        super().__init__(message)
        self.holder = holder or {}


def parse_dsn(dsn: str) -> dict:
    """Check a DSN and split it into what ``connect`` needs; raises ValueError naming the problem."""
    parts = urlsplit(dsn)
    if parts.scheme == "chdb":
        path = dsn[len("chdb://"):]
        if not path or path == "/":
            raise ValueError("a chdb DSN needs a data directory, as in chdb:///var/lib/gpufleet")
        return {"kind": "chdb", "path": os.path.abspath(os.path.expanduser(path))}
    if parts.scheme in ("http", "https"):
        if not parts.hostname:
            raise ValueError(f"no host in {dsn!r}")
        try:
            port = parts.port or (8443 if parts.scheme == "https" else 8123)
        except ValueError:
            raise ValueError(f"bad port in {dsn!r}") from None
        return {"kind": "http", "host": parts.hostname, "port": port, "secure": parts.scheme == "https",
                "username": parts.username or "default", "password": parts.password or ""}
    raise ValueError(f"unsupported scheme {parts.scheme!r}: use chdb:///<dir>, http://host:port or https://host:port")



@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]

    @property
    def statements(self) -> list[str]:
        text = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in text.split(";") if s.strip()]


def migrations() -> list[Migration]:
    """Every migration shipped with the package, in version order."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), entry.name[:-4], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if len({m.version for m in found}) != len(found):
        raise ValueError("two migrations share a version number")
    return found


@dataclass
class Insert:
    """Rows ready to insert into ``table``."""

    table: str
    columns: tuple[str, ...]
    rows: list[tuple]

    @cached_property
    def token(self) -> str:
        """A digest of the rows, computed once: every retry of this batch sends the very same token."""
        return hashlib.sha256(self.table.encode() + pickle.dumps(self.rows, protocol=5)).hexdigest()
