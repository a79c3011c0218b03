"""The job store: jobs and API tokens, in SQL (SQLAlchemy Core).

SQLite in the server's root by default (embedded, nothing to install), PostgreSQL by URL
(``postgresql+psycopg://user@host/db``).  Two tables:

- ``jobs``: one row per job — a calibration (`calibrate run`), a study (`calibrate loo` or
  `calibrate ablate`) or a score (`calibrate score`), its kind (`KINDS`): its id, the digest
  that addresses its content (`calibrate.service.intake`), state, target as submitted, the
  normalized options (JSON), its run directory, the pid of its process, times (ISO 8601, UTC),
  the message of a failure and the exit status.  The run directory is the job's truth about its
  progress; the row says only where it is and in which state.
- ``tokens``: API tokens by name, each as a random salt and the SHA-256 of salt + token; the
  token itself is shown once, when made, and stored nowhere.

Every state change is a compare-and-set on the state it expects (`Store.transition`), so the
scheduler and a cancel racing each other cannot both win.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError

from calibrate.errors import EnvironmentProblem, InputError
from calibrate.runs.lock import open_locked
from calibrate.service.settings import make_private

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
STATES = (QUEUED, RUNNING, DONE, FAILED, CANCELLED)
#: states a job no longer leaves
FINISHED = (DONE, FAILED, CANCELLED)
#: states in which a job answers a submission of the same content (the rest are tried again)
LIVE = (QUEUED, RUNNING, DONE)
#: the kinds of job: what the API submits and lists (/v1/calibrations, /v1/studies, /v1/scores)
#: and the jobs table records.  Not the kinds of run (`calibrate.runs.kinds.KINDS`, run.json's
#: "kind"), and not derived from them: a calibration job makes a calibration run, a study job a
#: leave-one-out or an ablation run (its options' "study" names the command, ``loo`` or
#: ``ablate``: one API resource, one form, for both), a score job no run at all.  A further kind
#: of study would be a further value of "study", not a further kind of job.
CALIBRATION, SCORE, STUDY = "calibration", "score", "study"
KINDS = (CALIBRATION, SCORE, STUDY)
#: the kinds whose job makes a run directory (journal, writer lock, export; `calibrate resume`)
RUN_KINDS = (CALIBRATION, STUDY)
TOKEN_PREFIX = "cal_"

metadata = MetaData()
jobs_table = Table(
    "jobs", metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("digest", String(64), nullable=False, index=True),
    Column("state", String(16), nullable=False, index=True),
    Column("target", Text, nullable=False),
    Column("target_digest", String(64), nullable=False),
    Column("options", JSON, nullable=False),
    Column("run_dir", Text, nullable=False),
    Column("pid", Integer),
    Column("created", String(40), nullable=False),
    Column("started", String(40)),
    Column("finished", String(40)),
    Column("message", Text),
    Column("exit_code", Integer),
    Column("starts", Integer, nullable=False, default=0),  # processes started: run, then resumes
    Column("owner", String(64), index=True),  # the token that submitted it (`Caller.owner`); None: before owners
)
tokens_table = Table(
    "tokens", metadata,
    Column("name", String(100), primary_key=True),
    Column("salt", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Column("created", String(40), nullable=False),
    Column("last_used", String(40)),
)
#: the server that schedules the store's jobs (one row, `Store.claim`), for the message that
#: refuses a second
servers_table = Table(
    "servers", metadata,
    Column("id", Integer, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("started", String(40), nullable=False),
)
#: the file beside an SQLite store whose `flock` the server scheduling its jobs holds (not the
#: database itself: closing any descriptor of it would drop SQLite's own POSIX locks)
SERVER_LOCK_SUFFIX = "-server.lock"
#: PostgreSQL: the advisory lock (a 64-bit key of this service's choosing) the server holds
ADVISORY_KEY = 0x63616C6962726174  # "calibrat"


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def parse_time(text: str | None) -> dt.datetime | None:
    return None if text is None else dt.datetime.fromisoformat(text)


@dataclass(frozen=True)
class Job:
    """One row of the jobs table."""

    id: str
    kind: str
    digest: str
    state: str
    target: str
    target_digest: str
    options: Mapping[str, Any]
    run_dir: str
    created: str
    pid: int | None = None
    started: str | None = None
    finished: str | None = None
    message: str | None = None
    exit_code: int | None = None
    starts: int = 0
    owner: str | None = None

    def readable_by(self, owner: str, public_reads: bool) -> bool:
        """Whether the token of `owner` may read this job's state and results: its own, any with
        --public-reads, and a job from before owners (those were open to everyone)."""
        return public_reads or self.owner in (owner, None)

    def owned_by(self, owner: str) -> bool:
        """Whether the token of `owner` submitted this job (may cancel it, read its log, study its
        target).  A job from before owners is nobody's: read-only."""
        return self.owner == owner

    @classmethod
    def of_row(cls, row: Any) -> Job:
        values = dict(row._mapping)
        values["starts"] = values.get("starts") or 0
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the token's name, and its owner id — the token's salted SHA-256 as
    stored, unique to the token (a new token of a revoked one's name is another owner), and
    nothing of the token itself."""

    name: str
    owner: str


@dataclass(frozen=True)
class TokenInfo:
    name: str
    created: str
    last_used: str | None = None


def _hash(salt: str, token: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + token.encode()).hexdigest()


@dataclass
class Store:
    """The jobs and tokens of one server, in the database at `url`."""

    url: str
    engine: Engine = field(init=False)
    _claim: int | Connection | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        try:
            if self.url.startswith("sqlite"):
                _private_sqlite(self.sqlite_files)
                # several threads (requests, the scheduler) and processes (`serve token`) at once
                self.engine = create_engine(self.url, connect_args={"timeout": 30})
                event.listen(self.engine, "connect", _sqlite_pragmas)
            else:
                self.engine = create_engine(self.url, pool_pre_ping=True)
            metadata.create_all(self.engine)
            _migrate(self.engine)
        except (ArgumentError, NoSuchModuleError) as error:
            raise InputError(f"--store {self.url!r} is not a database URL SQLAlchemy knows ({error}); "
                             f"give sqlite:///PATH or postgresql+psycopg://USER@HOST/DB") from None
        except OperationalError as error:
            reason = str(error.orig or error).strip().splitlines()[0]
            raise EnvironmentProblem(f"cannot open the job store {self.safe_url} ({reason}); check "
                                     f"that the database is running and the URL is right") from None

    @property
    def sqlite_files(self) -> list[Path]:
        """The files of an SQLite store (the database, its write-ahead log and shared memory);
        none for another database, or one in memory."""
        database = make_url(self.url).database if self.url.startswith("sqlite") else None
        if not database or database == ":memory:" or database.startswith("file:"):
            return []
        path = Path(database)
        return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"),
                path.with_name(path.name + SERVER_LOCK_SUFFIX)]

    @property
    def safe_url(self) -> str:
        """The URL without its password, for messages."""
        return self.engine.url.render_as_string(hide_password=True) if hasattr(self, "engine") else self.url

    def close(self) -> None:
        self.release()
        self.engine.dispose()

    # -- the one server that schedules the store's jobs

    def claim(self, holder: str) -> None:
        """Hold the store's server lock (released by the kernel, or by PostgreSQL with the
        connection, however the server ends) and record `holder` (its pid, root, address) for
        the message that refuses a second server: two schedulers on one store would take each
        other's queued jobs, and fail them, each from its own root.  A store in memory is this
        process's alone."""
        files = self.sqlite_files
        if self.url.startswith("sqlite") and not files:
            return
        if files:
            fd = open_locked(files[0].with_name(files[0].name + SERVER_LOCK_SUFFIX), 0o600)
            if fd is None:
                raise self._busy()
            self._claim = fd
        else:
            connection = self.engine.connect()
            if not connection.exec_driver_sql(f"SELECT pg_try_advisory_lock({ADVISORY_KEY})").scalar():
                connection.close()
                raise self._busy()
            connection.commit()
            self._claim = connection
        with self.engine.begin() as db:
            db.execute(delete(servers_table))
            db.execute(insert(servers_table).values(id=1, holder=holder, started=now()))

    def _busy(self) -> EnvironmentProblem:
        with self.engine.connect() as db:
            row = db.execute(select(servers_table.c.holder)).first()
        holder = row[0] if row is not None else "another process"
        return EnvironmentProblem(f"another calibrate serve ({holder}) runs the jobs of the store {self.safe_url}; "
                                  f"stop it, or give this one another --store")

    def release(self) -> None:
        """Give the server lock back (`claim`)."""
        claim, self._claim = self._claim, None
        if isinstance(claim, int):
            os.close(claim)
        elif claim is not None:
            claim.exec_driver_sql(f"SELECT pg_advisory_unlock({ADVISORY_KEY})")
            claim.commit()
            claim.close()

    # -- jobs

    def add_job(self, job: Job) -> bool:
        """Insert `job`; False when a job of that id exists already."""
        try:
            with self.engine.begin() as db:
                db.execute(insert(jobs_table).values(**job.to_row()))
        except IntegrityError:
            return False
        return True

    def job(self, job_id: str) -> Job | None:
        with self.engine.connect() as db:
            row = db.execute(select(jobs_table).where(jobs_table.c.id == job_id)).first()
        return None if row is None else Job.of_row(row)

    def jobs(self, *, kind: str | None = None, states: Iterable[str] | None = None,
             digest: str | None = None) -> list[Job]:
        """Jobs, oldest first, of a kind, in some states, of a digest."""
        query = select(jobs_table).order_by(jobs_table.c.created, jobs_table.c.id)
        if kind is not None:
            query = query.where(jobs_table.c.kind == kind)
        if states is not None:
            query = query.where(jobs_table.c.state.in_(list(states)))
        if digest is not None:
            query = query.where(jobs_table.c.digest == digest)
        with self.engine.connect() as db:
            return [Job.of_row(row) for row in db.execute(query)]

    def live_job(self, digest: str) -> Job | None:
        """The latest job of this content that is queued, running or done."""
        found = self.jobs(digest=digest, states=LIVE)
        return found[-1] if found else None

    def transition(self, job_id: str, from_states: Iterable[str], to_state: str,
                   **fields: Any) -> bool:
        """Set `job_id`'s state (and `fields`) if it is in one of `from_states`; whether it was."""
        query = (update(jobs_table)
                 .where(jobs_table.c.id == job_id, jobs_table.c.state.in_(list(from_states)))
                 .values(state=to_state, **fields))
        with self.engine.begin() as db:
            return db.execute(query).rowcount == 1

    def update(self, job_id: str, **fields: Any) -> None:
        with self.engine.begin() as db:
            db.execute(update(jobs_table).where(jobs_table.c.id == job_id).values(**fields))

    # -- tokens

    def create_token(self, name: str) -> str:
        """A new token named `name` (refused when the name is taken); returned once, stored
        as a salted hash."""
        if not name or len(name) > 100 or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise InputError(f"token name {name!r}: use 1 to 100 letters, digits, '-', '_' or '.'")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        try:
            with self.engine.begin() as db:
                db.execute(insert(tokens_table).values(name=name, salt=salt, hash=_hash(salt, token),
                                                       created=now()))
        except IntegrityError:
            raise InputError(f"a token named {name!r} exists already; choose another --name, or "
                             f"revoke it first (`calibrate serve token revoke {name}`)") from None
        return token

    def tokens(self) -> list[TokenInfo]:
        with self.engine.connect() as db:
            rows = db.execute(select(tokens_table.c.name, tokens_table.c.created,
                                     tokens_table.c.last_used).order_by(tokens_table.c.created))
            return [TokenInfo(*row) for row in rows]

    def revoke_token(self, name: str) -> bool:
        with self.engine.begin() as db:
            return db.execute(tokens_table.delete().where(tokens_table.c.name == name)).rowcount == 1

    def check_token(self, token: str) -> Caller | None:
        """The caller of token `token` (its name and owner id), or None (unknown or revoked)."""
        with self.engine.connect() as db:
            rows = db.execute(select(tokens_table.c.name, tokens_table.c.salt, tokens_table.c.hash)).all()
        for name, salt, digest in rows:
            if hmac.compare_digest(_hash(salt, token), digest):
                self._used(name)
                return Caller(str(name), str(digest))
        return None

    def _used(self, name: str) -> None:
        with self.engine.begin() as db:
            db.execute(update(tokens_table).where(tokens_table.c.name == name).values(last_used=now()))


def _migrate(engine: Engine) -> None:
    """Bring a store made by an older server to this schema (the store has no version number:
    each change is a column added where it is missing, so every older store is migrated in place):
    ``jobs.owner``, NULL for the jobs made before owners."""
    columns = {column["name"] for column in inspect(engine).get_columns("jobs")}
    if "owner" not in columns:
        with engine.begin() as db:
            db.exec_driver_sql("ALTER TABLE jobs ADD COLUMN owner VARCHAR(64)")
            db.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_jobs_owner ON jobs (owner)")


def _private_sqlite(files: list[Path]) -> None:
    """An SQLite store's files readable by this user alone, before SQLite opens them: the
    database created so, or tightened (`make_private`) with the log and shared memory it has;
    SQLite gives the ones it creates the database's mode."""
    if not files:
        return
    if files[0].exists():
        make_private([f for f in files if f.exists()], "the job store")
        return
    try:
        os.close(os.open(files[0], os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError:
        pass  # SQLite says why it cannot open it, in its own words


def _sqlite_pragmas(connection: Any, record: Any) -> None:
    """WAL: readers (requests) never wait for the writer (the scheduler), and the server and
    `calibrate serve token` can use the file at once."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
