"""Durable local file I/O shared by the client's store and the registry's storage.

``atomicfile`` (temp file, fsync, rename, read-only objects), ``faults`` (the named
crash points of the crash-consistency tests), ``keyfiles`` (signing-key and
trust-policy files) and ``locks`` (the one ``flock`` helper). These are the only
file-system writers below the store: the pure ``kvreg.core`` never touches a file,
and the registry imports this package but never ``kvreg.store``.
"""
