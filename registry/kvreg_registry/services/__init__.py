"""The registry's operations on metadata, independent of HTTP.

Each function takes a SQLAlchemy session (inside the caller's transaction), the
calling :class:`~kvreg_registry.auth.Principal`, and validated arguments; it
checks permissions, changes rows, appends the audit entry in the same
transaction, and raises ``KvregError`` subclasses. The HTTP routes
(``kvreg_registry.api``) and ``kvreg-admin`` both call these, so the rules live
in one place. Object bytes are not handled here (``kvreg_registry.storage``).
"""
