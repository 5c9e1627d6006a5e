"""Where keys and ledger rows live: SQLite (WAL, the default) or Postgres, with migrations.

Both backends implement :class:`Store` with the same SQL schema (``MIGRATIONS``); the ledger
suite in tests runs against each. SQLite runs the stdlib :mod:`sqlite3` on one dedicated
thread (one connection, so writes never contend with each other inside a process; WAL lets
``llmbridge usage`` read while the gateway writes). Postgres uses an asyncpg pool.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, fields
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from ...dialects.base import json_decode, json_encode
from .keys import KeyRecord

__all__ = [
    "BY",
    "KEY_COLUMNS",
    "LedgerRow",
    "MIGRATIONS",
    "PostgresStore",
    "ROW_COLUMNS",
    "SCHEMA_VERSION",
    "SQLiteStore",
    "Store",
    "connect",
]

BY = ("key", "model", "day")


class LedgerRow(NamedTuple):
    """One request, as the ledger keeps it: counts, money and timing; never prompt or output text.

    A named tuple: it goes to the database driver as it is (no per-row conversion on the way).
    """

    ts: float  # epoch seconds at the request's start
    request_id: str
    key_id: str | None  # None: no virtual key (static key or no auth)
    model: str | None
    upstream: str | None
    dialect_in: str
    dialect_out: str
    input_tokens: int | None
    output_tokens: int | None
    thinking_tokens: int | None
    cached_tokens: int | None
    cost_usd: float
    ttft_ms: float | None
    duration_ms: float
    status: int  # the HTTP status the client got
    error_type: str | None  # a hub error type, or "client_disconnected"
    cache: str | None = None  # "hit" / "miss": the model's response cache answered / was asked (gateway/_cache.py)


ROW_COLUMNS = LedgerRow._fields
KEY_COLUMNS = tuple(f.name for f in fields(KeyRecord))

# (version, statements). Append only: a released migration is never edited.
# Types are the ones both engines read the same (SQLite's affinity takes BIGINT/DOUBLE PRECISION).
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE llmb_keys (
                id TEXT PRIMARY KEY, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE,
                key_prefix TEXT NOT NULL, models TEXT, rpm_limit BIGINT, tpm_limit BIGINT,
                budget_usd DOUBLE PRECISION, budget_period TEXT NOT NULL, expires_at DOUBLE PRECISION,
                metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION)""",
            """CREATE TABLE llmb_usage (
                ts DOUBLE PRECISION NOT NULL, request_id TEXT NOT NULL, key_id TEXT, model TEXT,
                upstream TEXT, dialect_in TEXT NOT NULL, dialect_out TEXT NOT NULL,
                input_tokens BIGINT, output_tokens BIGINT, thinking_tokens BIGINT, cached_tokens BIGINT,
                cost_usd DOUBLE PRECISION NOT NULL, ttft_ms DOUBLE PRECISION,
                duration_ms DOUBLE PRECISION NOT NULL, status INTEGER NOT NULL, error_type TEXT)""",
            "CREATE INDEX llmb_usage_ts ON llmb_usage (ts)",
            "CREATE INDEX llmb_usage_key_ts ON llmb_usage (key_id, ts)",
        ],
    ),
    (
        2,
        [  # console sessions (gateway/_ui/_sessions.py): the token's SHA-256 and when it ends (epoch seconds)
            "CREATE TABLE llmb_sessions (digest TEXT PRIMARY KEY, ends_at DOUBLE PRECISION NOT NULL)",
        ],
    ),
    (
        # Stored responses (gateway/_responses_store.py) and response caches (gateway/_cache.py);
        # per-key switches for both; the ledger's cache flag.
        3,
        [
            """CREATE TABLE llmb_responses (
                id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL, previous_id TEXT, upstream TEXT,
                input TEXT NOT NULL, response TEXT NOT NULL)""",
            "CREATE INDEX llmb_responses_expires ON llmb_responses (expires_at)",
            """CREATE TABLE llmb_cache (
                key TEXT PRIMARY KEY, part TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL, vector TEXT, events TEXT NOT NULL)""",
            "CREATE INDEX llmb_cache_part ON llmb_cache (part, expires_at)",
            "CREATE INDEX llmb_cache_expires ON llmb_cache (expires_at)",
            "ALTER TABLE llmb_keys ADD COLUMN response_store INTEGER",
            "ALTER TABLE llmb_keys ADD COLUMN cache INTEGER",
            "ALTER TABLE llmb_usage ADD COLUMN cache TEXT",
        ],
    ),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


class Store(Protocol):
    """Persistence for keys and ledger rows. Every method may raise the backend's errors."""

    async def open(self) -> None:
        """Connect and bring the schema up to :data:`SCHEMA_VERSION`."""

    async def close(self) -> None: ...

    async def insert_key(self, key: KeyRecord) -> None: ...

    async def save_key(self, key: KeyRecord) -> None:
        """Overwrite the stored key with the same id."""

    async def get_key(self, key_id: str) -> KeyRecord | None: ...

    async def key_by_hash(self, key_hash: str) -> KeyRecord | None: ...

    async def list_keys(self) -> list[KeyRecord]: ...

    async def insert_rows(self, rows: Sequence[LedgerRow]) -> None:
        """Append ledger rows in one transaction (all or none)."""

    async def usage(self, by: str, since: float, key_id: str | None = None) -> list[dict[str, Any]]:
        """Totals per ``by`` (key, model or day, UTC) of rows at or after ``since``."""

    async def spend_since(self, key_id: str, since: float) -> float:
        """USD the key spent at or after ``since``."""

    async def rows(self, since: float = 0.0, limit: int = 10_000) -> list[LedgerRow]:
        """Ledger rows, oldest first (tests, exports)."""

    async def insert_session(self, digest: str, ends_at: float, now: float, keep: int) -> None:
        """Store a console session; first drop the ended ones and, past ``keep``, the oldest."""

    async def session_ends_at(self, digest: str) -> float | None:
        """When the console session ``digest`` ends (epoch seconds), or None if there is none."""

    async def delete_session(self, digest: str) -> None:
        """End a console session (logout)."""

    async def execute(self, sql: str, *args: Any) -> int:
        """One statement with ``?`` placeholders (the stored responses and caches); rows it changed."""

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """One query with ``?`` placeholders; its rows as tuples."""


def connect(url: str) -> Store:
    """The store for a ``database_url``: ``sqlite:///path`` or ``postgresql://…``."""
    if url.startswith("sqlite:///"):
        return SQLiteStore(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    raise ValueError(f"unsupported database_url {url.split(':', 1)[0]!r}: use sqlite:/// or postgresql://")


_SWITCHES = ("response_store", "cache")  # booleans kept as INTEGER (one type in both engines)


def _key_row(key: KeyRecord) -> tuple[Any, ...]:
    values = list(astuple(key))
    values[KEY_COLUMNS.index("models")] = json_encode(list(key.models)).decode() if key.models is not None else None
    values[KEY_COLUMNS.index("metadata")] = json_encode(key.metadata).decode()
    for name in _SWITCHES:
        values[KEY_COLUMNS.index(name)] = int(getattr(key, name))
    return tuple(values)


def _key_of(row: Sequence[Any]) -> KeyRecord:
    d = dict(zip(KEY_COLUMNS, row, strict=True))
    d["models"] = tuple(json_decode(d["models"])) if d["models"] is not None else None
    d["metadata"] = json_decode(d["metadata"])
    for name in _SWITCHES:
        d[name] = d[name] is None or bool(d[name])  # NULL: a key made before the switch existed (on)
    return KeyRecord(**d)


def _numbered(sql: str) -> str:
    """``?`` placeholders as Postgres's ``$1, $2, ...`` (the statements here hold no literal ``?``)."""
    parts = sql.split("?")
    return "".join(p + (f"${n}" if n < len(parts) else "") for n, p in enumerate(parts, start=1))


def _usage_rows(by: str, records: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    out = []
    for r in records:
        row = {by: r[0]}
        if by == "key":
            row["key_name"] = r[1]
        row.update(
            requests=int(r[2]),
            errors=int(r[3] or 0),
            input_tokens=int(r[4] or 0),
            output_tokens=int(r[5] or 0),
            thinking_tokens=int(r[6] or 0),
            cached_tokens=int(r[7] or 0),
            cost_usd=round(float(r[8] or 0.0), 9),
        )
        out.append(row)
    return out


_SUMS = (
    "COUNT(*), SUM(CASE WHEN u.error_type IS NULL THEN 0 ELSE 1 END), SUM(u.input_tokens), SUM(u.output_tokens), "
    "SUM(u.thinking_tokens), SUM(u.cached_tokens), SUM(u.cost_usd)"
)


def _usage_sql(by: str, day_expr: str, ph: Any) -> tuple[str, str]:
    """The report query for ``by`` (placeholders from ``ph(n)``); with and without a key filter."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}")
    group = {"key": "u.key_id", "model": "u.model", "day": day_expr}[by]
    name = "MAX(k.name)" if by == "key" else "NULL"
    base = f"SELECT {group} AS g, {name}, {_SUMS} FROM llmb_usage u LEFT JOIN llmb_keys k ON k.id = u.key_id"
    tail = f" GROUP BY {group} ORDER BY g"
    return (
        f"{base} WHERE u.ts >= {ph(1)}{tail}",
        f"{base} WHERE u.ts >= {ph(1)} AND u.key_id = {ph(2)}{tail}",
    )


_SESSIONS_ENDED = "DELETE FROM llmb_sessions WHERE ends_at <= $1"
# all but the newest N sessions ("LIMIT ALL" is Postgres's "no limit", SQLite's is "LIMIT -1")
_SESSIONS_OLDEST = (
    "DELETE FROM llmb_sessions WHERE digest IN "
    "(SELECT digest FROM llmb_sessions ORDER BY ends_at DESC LIMIT ALL OFFSET $1)"
)


# --------------------------------------------------------------------------- SQLite


_T = TypeVar("_T")


class SQLiteStore:
    """SQLite in WAL mode on one dedicated thread.

    ``synchronous=NORMAL``: a committed batch survives the process being killed (the WAL is
    written before commit returns); only an OS crash or power cut may lose the last commits.
    """

    def __init__(self, path: str):
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmbridge-sqlite")

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on the store's one thread (sqlite3 blocks); its result."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("CREATE TABLE IF NOT EXISTS llmb_schema (version INTEGER NOT NULL)")
        db.execute("BEGIN IMMEDIATE")  # two processes migrating at once: one waits for the other
        try:
            version = db.execute("SELECT MAX(version) FROM llmb_schema").fetchone()[0] or 0
            for number, statements in MIGRATIONS:
                if number > version:
                    for statement in statements:
                        db.execute(statement)
                    db.execute("INSERT INTO llmb_schema (version) VALUES (?)", (number,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            db.close()
            raise
        self._db = db

    async def close(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await self._run(close)
        self._pool.shutdown(wait=True)

    async def insert_key(self, key: KeyRecord) -> None:
        sql = f"INSERT INTO llmb_keys ({', '.join(KEY_COLUMNS)}) VALUES ({', '.join('?' * len(KEY_COLUMNS))})"
        await self._run(lambda: self._conn().execute(sql, _key_row(key)))

    async def save_key(self, key: KeyRecord) -> None:
        sets = ", ".join(f"{c} = ?" for c in KEY_COLUMNS[1:])
        row = _key_row(key)
        await self._run(lambda: self._conn().execute(f"UPDATE llmb_keys SET {sets} WHERE id = ?", (*row[1:], row[0])))

    async def _keys(self, where: str, args: tuple[Any, ...]) -> list[KeyRecord]:
        sql = f"SELECT {', '.join(KEY_COLUMNS)} FROM llmb_keys {where}"
        rows = await self._run(lambda: self._conn().execute(sql, args).fetchall())
        return [_key_of(r) for r in rows]

    async def get_key(self, key_id: str) -> KeyRecord | None:
        found = await self._keys("WHERE id = ?", (key_id,))
        return found[0] if found else None

    async def key_by_hash(self, key_hash: str) -> KeyRecord | None:
        found = await self._keys("WHERE key_hash = ?", (key_hash,))
        return found[0] if found else None

    async def list_keys(self) -> list[KeyRecord]:
        return await self._keys("ORDER BY created_at, id", ())

    async def insert_rows(self, rows: Sequence[LedgerRow]) -> None:
        sql = f"INSERT INTO llmb_usage ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join('?' * len(ROW_COLUMNS))})"
        values = list(rows)

        def write() -> None:
            db = self._conn()
            db.execute("BEGIN")
            try:
                db.executemany(sql, values)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        await self._run(write)

    async def usage(self, by: str, since: float, key_id: str | None = None) -> list[dict[str, Any]]:
        everyone, one = _usage_sql(by, "date(u.ts, 'unixepoch')", lambda n: "?")
        sql, args = (everyone, (since,)) if key_id is None else (one, (since, key_id))
        return _usage_rows(by, await self._run(lambda: self._conn().execute(sql, args).fetchall()))

    async def spend_since(self, key_id: str, since: float) -> float:
        sql = "SELECT SUM(cost_usd) FROM llmb_usage WHERE key_id = ? AND ts >= ?"
        row = await self._run(lambda: self._conn().execute(sql, (key_id, since)).fetchone())
        return float(row[0] or 0.0)

    async def rows(self, since: float = 0.0, limit: int = 10_000) -> list[LedgerRow]:
        sql = f"SELECT {', '.join(ROW_COLUMNS)} FROM llmb_usage WHERE ts >= ? ORDER BY ts, rowid LIMIT ?"
        return [LedgerRow(*r) for r in await self._run(lambda: self._conn().execute(sql, (since, limit)).fetchall())]

    async def insert_session(self, digest: str, ends_at: float, now: float, keep: int) -> None:
        def write() -> None:
            db = self._conn()
            db.execute("BEGIN")
            try:
                db.execute(_SESSIONS_ENDED.replace("$1", "?"), (now,))
                db.execute(_SESSIONS_OLDEST.replace("ALL", "-1").replace("$1", "?"), (max(0, keep - 1),))
                db.execute("INSERT INTO llmb_sessions (digest, ends_at) VALUES (?, ?)", (digest, ends_at))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        await self._run(write)

    async def session_ends_at(self, digest: str) -> float | None:
        sql = "SELECT ends_at FROM llmb_sessions WHERE digest = ?"
        row = await self._run(lambda: self._conn().execute(sql, (digest,)).fetchone())
        return float(row[0]) if row else None

    async def delete_session(self, digest: str) -> None:
        await self._run(lambda: self._conn().execute("DELETE FROM llmb_sessions WHERE digest = ?", (digest,)))

    async def execute(self, sql: str, *args: Any) -> int:
        return await self._run(lambda: self._conn().execute(sql, args).rowcount)

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return await self._run(lambda: self._conn().execute(sql, args).fetchall())


# --------------------------------------------------------------------------- Postgres


class PostgresStore:
    """Postgres through an asyncpg pool; migrations under an advisory lock (N replicas start at once)."""

    _LOCK = 0x6C6C6D62  # "llmb": the advisory lock id the migrations take

    def __init__(self, url: str, pool_size: int = 4):
        self.url = url
        self.pool_size = pool_size
        self._pool: Any = None

    def _p(self) -> Any:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    async def open(self) -> None:
        try:
            import asyncpg
        except ImportError as exc:  # pragma: no cover - asyncpg is a dependency
            raise RuntimeError("database_url is postgresql:// but asyncpg is not installed") from exc
        self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=self.pool_size, timeout=10)
        async with self._pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", self._LOCK)
            await db.execute("CREATE TABLE IF NOT EXISTS llmb_schema (version INTEGER NOT NULL)")
            version = await db.fetchval("SELECT MAX(version) FROM llmb_schema") or 0
            for number, statements in MIGRATIONS:
                if number > version:
                    for statement in statements:
                        await db.execute(statement)
                    await db.execute("INSERT INTO llmb_schema (version) VALUES ($1)", number)

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def insert_key(self, key: KeyRecord) -> None:
        marks = ", ".join(f"${i}" for i in range(1, len(KEY_COLUMNS) + 1))
        await self._p().execute(f"INSERT INTO llmb_keys ({', '.join(KEY_COLUMNS)}) VALUES ({marks})", *_key_row(key))

    async def save_key(self, key: KeyRecord) -> None:
        sets = ", ".join(f"{c} = ${i}" for i, c in enumerate(KEY_COLUMNS[1:], start=2))
        await self._p().execute(f"UPDATE llmb_keys SET {sets} WHERE id = $1", *_key_row(key))

    async def _keys(self, where: str, *args: Any) -> list[KeyRecord]:
        rows = await self._p().fetch(f"SELECT {', '.join(KEY_COLUMNS)} FROM llmb_keys {where}", *args)
        return [_key_of(tuple(r)) for r in rows]

    async def get_key(self, key_id: str) -> KeyRecord | None:
        found = await self._keys("WHERE id = $1", key_id)
        return found[0] if found else None

    async def key_by_hash(self, key_hash: str) -> KeyRecord | None:
        found = await self._keys("WHERE key_hash = $1", key_hash)
        return found[0] if found else None

    async def list_keys(self) -> list[KeyRecord]:
        return await self._keys("ORDER BY created_at, id")

    async def insert_rows(self, rows: Sequence[LedgerRow]) -> None:
        # COPY: one round trip for the whole batch, the cheapest way into Postgres.
        async with self._p().acquire() as db:
            await db.copy_records_to_table("llmb_usage", records=list(rows), columns=ROW_COLUMNS)

    async def usage(self, by: str, since: float, key_id: str | None = None) -> list[dict[str, Any]]:
        day = "to_char(to_timestamp(u.ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        everyone, one = _usage_sql(by, day, lambda n: f"${n}")
        records = await (self._p().fetch(everyone, since) if key_id is None else self._p().fetch(one, since, key_id))
        return _usage_rows(by, [tuple(r) for r in records])

    async def spend_since(self, key_id: str, since: float) -> float:
        value = await self._p().fetchval(
            "SELECT SUM(cost_usd) FROM llmb_usage WHERE key_id = $1 AND ts >= $2", key_id, since
        )
        return float(value or 0.0)

    async def rows(self, since: float = 0.0, limit: int = 10_000) -> list[LedgerRow]:
        sql = f"SELECT {', '.join(ROW_COLUMNS)} FROM llmb_usage WHERE ts >= $1 ORDER BY ts, ctid LIMIT $2"
        return [LedgerRow(*tuple(r)) for r in await self._p().fetch(sql, since, limit)]

    async def insert_session(self, digest: str, ends_at: float, now: float, keep: int) -> None:
        async with self._p().acquire() as db, db.transaction():
            await db.execute(_SESSIONS_ENDED, now)
            await db.execute(_SESSIONS_OLDEST, max(0, keep - 1))
            await db.execute("INSERT INTO llmb_sessions (digest, ends_at) VALUES ($1, $2)", digest, ends_at)

    async def session_ends_at(self, digest: str) -> float | None:
        value = await self._p().fetchval("SELECT ends_at FROM llmb_sessions WHERE digest = $1", digest)
        return float(value) if value is not None else None

    async def delete_session(self, digest: str) -> None:
        await self._p().execute("DELETE FROM llmb_sessions WHERE digest = $1", digest)

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._p().execute(_numbered(sql), *args)  # e.g. "DELETE 3"
        tail = str(status).rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self._p().fetch(_numbered(sql), *args)]
