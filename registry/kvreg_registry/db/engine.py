"""Database engines and transactions for SQLite (WAL, every commit fsynced) and PostgreSQL (psycopg 3).

``Database`` owns one SQLAlchemy engine and hands out sessions:

- ``db.write()`` — a transaction that will write. On SQLite it starts with
  ``BEGIN IMMEDIATE`` (the write lock is taken up front, so two writers never
  deadlock upgrading a read lock; waiting ones block up to ``busy_timeout``).
  On PostgreSQL it is an ordinary READ COMMITTED transaction; code that needs
  serialization takes row locks (``SELECT ... FOR UPDATE`` on ``log_head``).
- ``db.read()`` — a read-only transaction (plain ``BEGIN`` on SQLite, so readers
  never wait for writers under WAL).

Both commit on success and roll back on any exception. ``insert_ignore`` is the
portable ``INSERT ... ON CONFLICT DO NOTHING`` used for idempotent writes;
``add_in_savepoint`` inserts one ORM row whose unique key a concurrent
transaction may take first, without losing the enclosing transaction.
``upgrade(url)`` runs the alembic migrations to ``head``: that is how every
database is created, in tests too. Nothing here knows the domain.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Engine, Result, Table, create_engine, event, insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kvreg.core.errors import ConfigError, UnavailableError

log = logging.getLogger(__name__)

_WRITE_OPTION = "kvreg_write"
SQLITE_BUSY_TIMEOUT_S = 30.0
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def migrations_dir() -> Path:
    """``migrations/`` of the source tree, else the copy a wheel carries inside the package."""
    source_tree = _PACKAGE_ROOT.parents[1] / "migrations"
    if (source_tree / "env.py").is_file():
        return source_tree
    return _PACKAGE_ROOT / "migrations"


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own is deferred and
        # would turn every writer into a read-then-upgrade deadlock candidate).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: the write-ahead log is fsynced at every commit, before the registry answers. With
        # NORMAL (SQLite's usual WAL setting) a power cut loses the last commits: refs moved,
        # envelopes and audit entries already acknowledged to their clients
        # (bench/crash_states.py finds it). PostgreSQL's default is the same guarantee.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(_WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL with ``synchronous=FULL``, foreign keys and a busy timeout."""
    try:
        parsed = make_url(url)
    except Exception as e:
        raise ConfigError(f"invalid database URL: {e}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
        )
        _install_sqlite_hooks(engine)
        return engine
    if backend == "postgresql":
        if parsed.drivername != "postgresql+psycopg":
            raise ConfigError(
                f"unsupported PostgreSQL driver {parsed.drivername!r}",
                hint="use postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB (psycopg 3)",
            )
        return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
    raise ConfigError(
        f"unsupported database {backend!r}", hint="use sqlite:///PATH or postgresql+psycopg://..."
    )


class Database:
    """One engine and its session factories."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(
            self.engine.execution_options(**{_WRITE_OPTION: True}), expire_on_commit=False
        )
        self._write_lock = threading.Lock() if self.dialect == "sqlite" else None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._writer_turn(), _unavailable_on_connect_error(), self._write() as session, session.begin():
            yield session

    @contextmanager
    def _writer_turn(self) -> Iterator[None]:
        """On SQLite, one writing transaction of this process at a time, queued on a lock: a
        waiting writer starts as soon as the lock is free, where SQLite's busy handler would
        sleep and poll (1, 2, 5, 10 ms ...). Other processes still meet ``busy_timeout``."""
        if self._write_lock is None:
            yield
            return
        if not self._write_lock.acquire(timeout=SQLITE_BUSY_TIMEOUT_S):
            raise UnavailableError("the metadata database is busy; retry later")
        try:
            yield
        finally:
            self._write_lock.release()

    @contextmanager
    def read(self) -> Iterator[Session]:
        with _unavailable_on_connect_error(), self._read() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


@contextmanager
def _unavailable_on_connect_error() -> Iterator[None]:
    """Operational database errors (unreachable, refused credentials, locked, a serialization
    failure) become ``UnavailableError`` (HTTP 503, which clients retry), never a 500."""
    try:
        yield
    except OperationalError as e:
        # The detail (host, driver message) goes to the server log, not to clients.
        log.warning("metadata database error: %s", e.orig)
        raise UnavailableError("the metadata database is unavailable; retry later") from e


def rowcount(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE run by ``Session.execute`` matched (0 if the driver does not say).

    Such a result is a ``CursorResult``; ``Session.execute`` is typed as returning a plain
    ``Result``, which has no ``rowcount``."""
    return cast(CursorResult[Any], result).rowcount or 0


def insert_ignore(session: Session, table: Table, rows: Sequence[Mapping[str, Any]]) -> int:
    """``INSERT ... ON CONFLICT DO NOTHING`` on SQLite and PostgreSQL.

    Returns the number of rows inserted."""
    return len(insert_ignore_returning(session, table, rows, next(iter(table.primary_key.columns)).name))


def insert_ignore_returning(
    session: Session, table: Table, rows: Sequence[Mapping[str, Any]], column: str
) -> list[Any]:
    """:func:`insert_ignore` that returns ``column`` of each row really inserted (in no set
    order): one statement for all ``rows`` (SQLAlchemy sends them as one multi-row INSERT)."""
    if not rows:
        return []
    # RETURNING tells the rows really inserted (rowcount is not reliable for
    # ON CONFLICT DO NOTHING across drivers and executemany).
    stmt = _insert_ignore_statement(session.get_bind().dialect.name, table, column)
    return list(session.execute(stmt, list(rows)).scalars())


@functools.lru_cache(maxsize=64)
def _insert_ignore_statement(dialect: str, table: Table, column: str) -> Any:
    """The statement of :func:`insert_ignore_returning`, built once per table and column (a
    statement is immutable; building one and its cache key cost more than running it)."""
    if dialect == "sqlite":
        stmt: Any = sqlite_insert(table).on_conflict_do_nothing()
    elif dialect == "postgresql":
        stmt = pg_insert(table).on_conflict_do_nothing()
    else:  # pragma: no cover - make_engine refuses other backends
        stmt = insert(table)
    return stmt.returning(table.c[column])


def add_in_savepoint(session: Session, row: object) -> None:
    """Add ``row`` and flush it inside a savepoint.

    If a constraint refuses it (a concurrent transaction inserted the same key first), the
    ``IntegrityError`` propagates for the caller to translate, only the savepoint is rolled
    back (the row leaves the session with it), and the enclosing transaction stays usable.
    The row is added *inside* the savepoint on purpose: ``begin_nested()`` first flushes
    what is pending, so a row added before it would be inserted outside the savepoint and
    its failure would abort the whole transaction (a 500 instead of a 409 on PostgreSQL;
    found by ``bench/soak.py``: two pushers creating the same ref).
    """
    with session.begin_nested():
        session.add(row)
        session.flush()


def alembic_config(url: str) -> Any:
    """The alembic ``Config`` of this repository's ``migrations/``, pointed at ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


@functools.lru_cache(maxsize=1)
def head_revisions() -> frozenset[str]:
    """The revisions at the head of this code's migrations (what ``upgrade`` brings a database to)."""
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


def schema_revisions(connection: Connection) -> frozenset[str]:
    """The revisions the database's ``alembic_version`` names (none: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    return frozenset(MigrationContext.configure(connection).get_current_heads())


def upgrade(url: str, revision: str = "head") -> None:
    """Create or migrate the database at ``url`` to ``revision`` with alembic."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)
