"""The server's durable state: API keys (hashed) and jobs, in one SQLite file.

Schema (``PRAGMA user_version`` = 1):

- ``keys(id, name, key_hash UNIQUE, created_at)``: only the SHA-256 of each key is stored.
- ``jobs(id, key_id, name, project, resource_id, status, created_at, queued_at, started_at,
  finished_at, exit_code, algorithm, environment, error, pid, resume, attempts)``: one row per
  accepted experiment. ``queued_at`` orders the queue (a resumed job goes to its end), ``pid``
  is the worker's process id while it runs (its process group id too), ``resume`` says whether
  the next start continues from the run's checkpoints, ``attempts`` counts starts.

Rejected submissions (invalid or oversized manifests) never get a row. Every write commits at
once in WAL mode with ``synchronous=FULL``, so a killed server loses nothing it acknowledged.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
DB_NAME = "arena.sqlite3"
TERMINAL = frozenset({"completed", "failed", "stopped", "interrupted"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    key_id INTEGER NOT NULL REFERENCES keys(id),
    name TEXT,
    project TEXT,
    resource_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    queued_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    exit_code INTEGER,
    algorithm TEXT NOT NULL,
    environment TEXT NOT NULL,
    error TEXT,
    pid INTEGER,
    resume INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs(key_id, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs(status, queued_at);
"""

PUBLIC_FIELDS = ("id", "name", "project", "resource_id", "status", "created_at", "started_at",
                 "finished_at", "exit_code", "algorithm", "environment", "error")


def now_iso() -> str:
    """The current UTC time as ISO 8601 with microseconds (sorts as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Job:
    """One row of ``jobs``."""

    id: str
    key_id: int
    name: str | None
    project: str | None
    resource_id: str
    status: str
    created_at: str
    queued_at: str
    started_at: str | None
    finished_at: str | None
    exit_code: int | None
    algorithm: str
    environment: str
    error: str | None
    pid: int | None
    resume: bool
    attempts: int

    def public(self, progress: dict[str, Any] | None = None) -> dict[str, Any]:
        """The Experiment object of the HTTP API (`progress`: what the run directory shows so far)."""
        return {**{field: getattr(self, field) for field in PUBLIC_FIELDS}, "progress": progress}

    @property
    def started(self) -> bool:
        """Whether a worker was ever started for it."""
        return self.attempts > 0 or self.started_at is not None


class Store:
    """Thread-safe access to ``DATA_DIR/arena.sqlite3`` (one connection, one lock)."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = data_dir / DB_NAME
        fresh = not self.path.exists()
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        if fresh:
            self.path.chmod(0o600)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise RuntimeError(f"{self.path}: store schema version {version} is newer than this server "
                               f"({SCHEMA_VERSION}); upgrade agile-arena")
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------ keys
    def add_key(self, name: str, key_hash: str) -> int:
        """Store a key's hash under a name; returns its id."""
        with self._transaction() as db:
            cursor = db.execute("INSERT INTO keys (name, key_hash, created_at) VALUES (?, ?, ?)",
                                (name, key_hash, now_iso()))
            return int(cursor.lastrowid or 0)

    def key_id_for_hash(self, key_hash: str) -> int | None:
        """The id of the key with this hash, or None."""
        with self._lock:
            row = self._db.execute("SELECT id FROM keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return None if row is None else int(row["id"])

    # ------------------------------------------------------------------ jobs
    def add_job(self, job_id: str, key_id: int, name: str | None, project: str | None, resource_id: str,
                algorithm: str, environment: str) -> Job:
        """Insert a new queued job."""
        stamp = now_iso()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO jobs (id, key_id, name, project, resource_id, status, created_at, queued_at, "
                "algorithm, environment) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                (job_id, key_id, name, project, resource_id, stamp, stamp, algorithm, environment))
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str, key_id: int | None = None) -> Job | None:
        """A job by id; with `key_id`, only when that key owns it."""
        query = "SELECT * FROM jobs WHERE id = ?"
        args: list[Any] = [job_id]
        if key_id is not None:
            query += " AND key_id = ?"
            args.append(key_id)
        with self._lock:
            row = self._db.execute(query, args).fetchone()
        return None if row is None else _job(row)

    def matching(self, reference: str, key_id: int) -> list[Job]:
        """A key's jobs whose id or name is `reference` or starts with it, newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM jobs WHERE key_id = ? AND (substr(id, 1, ?) = ? OR substr(name, 1, ?) = ?) "
                "ORDER BY created_at DESC, rowid DESC",
                (key_id, len(reference), reference, len(reference), reference)).fetchall()
        return [_job(row) for row in rows]

    def list_for_key(self, key_id: int) -> list[Job]:
        """A key's jobs, newest first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM jobs WHERE key_id = ? ORDER BY created_at DESC, rowid DESC",
                                    (key_id,)).fetchall()
        return [_job(row) for row in rows]

    def with_status(self, status: str) -> list[Job]:
        """Jobs in one status, oldest queued first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM jobs WHERE status = ? ORDER BY queued_at, rowid",
                                    (status,)).fetchall()
        return [_job(row) for row in rows]

    def count(self, status: str) -> int:
        """How many jobs are in `status`."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM jobs WHERE status = ?", (status,)).fetchone()[0])

    def mark_running(self, job_id: str, pid: int) -> None:
        """The worker started."""
        with self._transaction() as db:
            db.execute("UPDATE jobs SET status = 'running', pid = ?, started_at = ?, finished_at = NULL, "
                       "exit_code = NULL, error = NULL, attempts = attempts + 1 WHERE id = ?",
                       (pid, now_iso(), job_id))

    def mark_finished(self, job_id: str, status: str, exit_code: int | None, error: str | None) -> None:
        """The job reached a terminal status."""
        assert status in TERMINAL, status
        with self._transaction() as db:
            db.execute("UPDATE jobs SET status = ?, exit_code = ?, error = ?, finished_at = ?, pid = NULL "
                       "WHERE id = ?", (status, exit_code, error, now_iso(), job_id))

    def delete(self, job_id: str) -> bool:
        """Remove a job's row; whether there was one."""
        with self._transaction() as db:
            return db.execute("DELETE FROM jobs WHERE id = ?", (job_id,)).rowcount > 0

    def requeue(self, job_id: str, resume: bool) -> None:
        """Queue a finished job again (at the end of the queue)."""
        with self._transaction() as db:
            db.execute("UPDATE jobs SET status = 'queued', queued_at = ?, finished_at = NULL, exit_code = NULL, "
                       "error = NULL, pid = NULL, resume = ? WHERE id = ?", (now_iso(), int(resume), job_id))


def _job(row: sqlite3.Row) -> Job:
    values = dict(row)
    values["resume"] = bool(values["resume"])
    return Job(**values)
