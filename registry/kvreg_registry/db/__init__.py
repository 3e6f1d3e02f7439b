"""The registry's metadata database: models (schema), engines and transactions."""

from kvreg_registry.db.engine import Database, insert_ignore, upgrade
from kvreg_registry.db.models import Base

__all__ = ["Base", "Database", "insert_ignore", "upgrade"]
