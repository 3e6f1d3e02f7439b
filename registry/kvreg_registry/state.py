"""The registry's open resources: its settings, database, object storage and audit log.

:func:`open_state` opens them (running the migrations first unless
``settings.migrate_on_start`` is off) for the HTTP app's lifespan (``app.create_app``)
and for each ``kvreg-admin`` command; the caller disposes of the database engine.
This module builds no FastAPI app and serves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreg_registry.db.engine import Database, upgrade
from kvreg_registry.services.log import AuditLog, load_or_create_key
from kvreg_registry.settings import Settings
from kvreg_registry.storage import open_storage
from kvreg_registry.storage.base import ObjectStorage


@dataclass
class RegistryState:
    settings: Settings
    db: Database
    storage: ObjectStorage
    log: AuditLog


def open_state(settings: Settings) -> RegistryState:
    """Open (and migrate) the database and the storage backend that ``settings`` name."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.effective_database_url
    if settings.migrate_on_start:
        upgrade(url)
    db = Database(url)
    options = settings.s3.as_storage_options() if settings.effective_storage_url.startswith("s3://") else {}
    storage = open_storage(settings.effective_storage_url, **options)
    storage.check()
    audit_log = AuditLog(db, load_or_create_key(settings.log_key_path), settings.log_origin)
    return RegistryState(settings=settings, db=db, storage=storage, log=audit_log)
