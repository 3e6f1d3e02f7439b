"""Crash-safe file writes: temp file, fsync, chmod, rename, fsync the directory.

Folders a write needs are created by :func:`ensure_dir`, which fsyncs the parent of each new
one: a file fsynced into a folder whose own name was never made durable can vanish with it.

Every file kvreg writes (store objects, refs, envelopes, keys, the trust policy,
caches) goes through this module, so that a crash (power loss, kill -9, an
exception half-way) leaves either the old file or the new file,
and at worst a ``*.incomplete`` temp file that ``gc`` removes later: never a
half-written file under a name that readers trust. The pattern is the one of
huggingface_hub's downloads (``*.incomplete`` then atomic rename).

Temp files must live on the same filesystem as their destination (``os.replace``
is only atomic within one filesystem); callers pass the store's ``tmp/`` folder,
which sits next to the other store folders, or let the temp file be created in the
destination folder itself.

This module does not decide *what* to write or whether bytes are valid: callers
verify digests before they call :func:`install` or :func:`atomic_write_bytes`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from kvreg.core.errors import StoreError

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".incomplete"
READ_ONLY = 0o444


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse fsync on folders; the rename still happened
        log.debug("fsync of folder %s failed: %s", directory, exc)
    finally:
        os.close(fd)


def ensure_dir(directory: str | os.PathLike[str]) -> None:
    """Create ``directory`` and its missing parents, each new one made durable.

    A new folder is a name in its parent folder, and only an fsync of the parent writes that
    name down: without it a power cut can take the folder, and every file fsynced inside it,
    away (POSIX promises nothing more; ALICE's weak persistence model, which
    ``bench/crash_states.py`` explores, finds exactly that). A folder that exists already costs
    one ``stat``. When another writer created it first, the parent is fsynced anyway: that
    writer may not have fsynced it yet.
    """
    path = Path(directory)
    if path.is_dir():
        return
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise
        fsync_dir(folder.parent)


def remove_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a file if it exists (cleanup of temp files on error paths)."""
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()


@contextlib.contextmanager
def temp_file(directory: str | os.PathLike[str], *, prefix: str = "") -> Iterator[tuple[BinaryIO, Path]]:
    """Yield ``(file, path)`` of a fresh ``*.incomplete`` file in ``directory``.

    The file is removed when the block exits, whether or not it raised: a caller
    that wants to keep the bytes moves or links the path to its final name inside
    the block (see :func:`install`). After a crash the file stays, and ``gc``
    removes it once it is older than its grace period.
    """
    Path(directory).mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=TEMP_SUFFIX)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f, path
    finally:
        remove_quietly(path)


def finish(f: BinaryIO) -> None:
    """Flush a temp file's user-space buffer and fsync its bytes to disk."""
    f.flush()
    os.fsync(f.fileno())


def install(
    tmp: Path, final: Path, *, mode: int = READ_ONLY, exclusive: bool = False, sync_dir: bool = True
) -> bool:
    """Move a finished temp file to its final name; fsync the destination folder (unless
    ``sync_dir`` is false: then the caller fsyncs it, e.g. once for several files).

    With ``exclusive=False`` the temp file replaces any file at ``final``
    (``os.replace``) and the function returns ``True``. With ``exclusive=True`` an
    existing file at ``final`` is never replaced: the temp file is hard-linked to
    ``final`` and the function returns ``False`` if another writer got there
    first (the temp file is left for the caller's cleanup). Filesystems without
    hard links fall back to ``os.replace``, which is still safe for
    content-addressed names (the bytes at ``final`` are the same either way).
    """
    tmp.chmod(mode)
    ensure_dir(final.parent)
    if exclusive:
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as exc:
            log.debug("hard link %s -> %s failed (%s); falling back to rename", tmp, final, exc)
            tmp.replace(final)
    else:
        tmp.replace(final)
    if sync_dir:
        fsync_dir(final.parent)
    return True


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    mode: int = READ_ONLY,
    tmp_dir: str | os.PathLike[str] | None = None,
    exclusive: bool = False,
) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new file.

    Writes a temp file in ``tmp_dir`` (which must be on the same filesystem as
    ``path``) or, by default, in ``path``'s own folder; fsyncs it, sets ``mode``
    (read-only by default), renames it over ``path`` and fsyncs the folder.
    With ``exclusive=True`` an existing file is never replaced: ``FileExistsError``
    is raised and nothing changes (key files use this). Raises ``StoreError`` if the
    file cannot be written.
    """
    final = Path(path)
    try:
        ensure_dir(final.parent)
        where = tmp_dir if tmp_dir is not None else final.parent
        with temp_file(where, prefix=f".{final.name}.") as (f, tmp):
            f.write(data)
            finish(f)
            installed = install(tmp, final, mode=mode, exclusive=exclusive)
    except OSError as exc:
        raise StoreError(f"cannot write {final}: {exc}", path=str(final)) from exc
    if not installed:
        raise FileExistsError(errno.EEXIST, "file exists; not replacing it", str(final))


def append_durable(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Append ``data`` to ``path`` (created if missing) and fsync it.

    One ``write`` on an ``O_APPEND`` descriptor: concurrent appenders do not
    interleave within a line of reasonable size. Used for ref logs.
    """
    target = Path(path)
    ensure_dir(target.parent)
    created = not target.exists()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(target.parent)
