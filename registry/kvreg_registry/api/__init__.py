"""The HTTP API under ``/api/v1`` (docs/protocol.md): thin FastAPI routes over
``kvreg_registry.services`` and the storage backend."""
