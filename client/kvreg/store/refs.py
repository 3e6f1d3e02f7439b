"""Local refs: ``namespace/name`` -> manifest digest, moved by compare-and-swap.

Layout under the store root:

- ``refs/<namespace>/<name>``: one file per ref. A movable ref holds the manifest
  digest and a newline (``sha256:<hex>\\n``). An immutable **tag** holds one line
  of JSON, ``{"digest":"sha256:<hex>","tag":true}\\n``: the tag marker lives in the
  same file as the digest, so one atomic rename creates it and no crash can leave
  a ref half-tagged. A tag can never be moved or deleted (``RefConflictError``).
- ``refs/.lock``: every change takes an exclusive ``fcntl.flock`` on it, so a
  compare-and-swap is atomic across threads and processes. Reads take no lock:
  ref files are replaced atomically, so a reader sees the old or the new digest.
- ``logs/refs/<namespace>/<name>``: the reflog, one JSON line per move
  (``{"time","op","old","new"}``), appended and fsynced after the ref changed. It
  is kept when the ref is deleted, for audit.

Ref names arrive as ``kvreg.core.names.RefName``, already validated there. This
module still builds paths only from the name's two parts, refuses a part that is
empty, starts with a dot, or holds a path separator, and checks that the resolved
path stays inside ``refs/``. It does not check that the target manifest exists or
is signed: callers store objects and envelope first and move the ref last.
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from kvreg.core.digest import Digest
from kvreg.core.errors import (
    InvalidNameError,
    KvregError,
    RefConflictError,
    RefNotFoundError,
    StoreError,
)
from kvreg.core.names import RefName
from kvreg.core.timestamps import rfc3339_micro
from kvreg.fileio.atomicfile import append_durable, atomic_write_bytes, fsync_dir
from kvreg.fileio.faults import crash_point
from kvreg.fileio.locks import flock

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
_REF_MODE = 0o644
_TAG_MODE = 0o444
_FORBIDDEN = frozenset("/\\\x00")


class _AnyType(enum.Enum):
    ANY = "ANY"

    def __repr__(self) -> str:
        return "ANY"


ANY: Final = _AnyType.ANY
"""``expected=ANY``: move the ref whatever it points at now (no compare)."""

Expected = Digest | None | Literal[_AnyType.ANY]


class RefLike(Protocol):
    """What the store needs from a ref name (``kvreg.core.names.RefName`` provides it)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RefEntry:
    """One ref: its name, the manifest digest it points at, and whether it is a tag."""

    ref: RefName
    digest: Digest
    tag: bool


@dataclass(frozen=True, slots=True)
class RefProblem:
    """A ref file that cannot be read: ``name`` is its path relative to ``refs/``."""

    name: str
    message: str


@dataclass(frozen=True, slots=True)
class RefLogEntry:
    """One reflog line: when, what operation, and the digests before and after."""

    time: str
    op: str
    old: Digest | None
    new: Digest | None


def _utc_now() -> str:
    return rfc3339_micro()


def _parse_ref_name(text: str) -> RefName:
    return RefName.parse(text)


def encode_ref(digest: Digest, *, tag: bool) -> bytes:
    """The bytes of a ref file (see the module docstring for the format)."""
    if tag:
        body = json.dumps({"digest": str(digest), "tag": True}, sort_keys=True, separators=(",", ":"))
        return body.encode("ascii") + b"\n"
    return f"{digest}\n".encode("ascii")


def decode_ref(data: bytes) -> tuple[Digest, bool]:
    """Parse a ref file's bytes into ``(digest, is_tag)``; ``ValueError`` if malformed."""
    text = data.decode("ascii")
    if not text.endswith("\n") or text.count("\n") != 1:
        raise ValueError("a ref file is exactly one line ending in a newline")
    line = text[:-1]
    if line.startswith("{"):
        obj = json.loads(line)
        if not isinstance(obj, dict) or set(obj) != {"digest", "tag"} or obj["tag"] is not True:
            raise ValueError('a tag file is {"digest": ..., "tag": true}')
        return Digest(obj["digest"]), True
    return Digest(line), False


class RefStore:
    """Refs under ``<root>/refs``, reflogs under ``<root>/logs/refs``; ``root`` is ``$KVREG_HOME``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.refs_dir = self.root / "refs"
        self.logs_dir = self.root / "logs" / "refs"
        self.tmp_dir = self.root / "tmp"

    def __repr__(self) -> str:
        return f"RefStore({str(self.root)!r})"

    # --- paths ----------------------------------------------------------------

    @staticmethod
    def _parts(ref: RefLike) -> tuple[str, str]:
        parts = (ref.namespace, ref.name)
        for part in parts:
            if (
                not isinstance(part, str)
                or not part
                or part.startswith(".")
                or any(c in _FORBIDDEN for c in part)
            ):
                raise InvalidNameError(f"ref name part {part!r} of {ref} cannot be stored", ref=str(ref))
        return parts

    def _path(self, ref: RefLike) -> Path:
        ns, name = self._parts(ref)
        path = self.refs_dir / ns / name
        if path.resolve().parent.parent != self.refs_dir.resolve():
            raise InvalidNameError(f"ref {ref} resolves outside {self.refs_dir}", ref=str(ref))
        return path

    def _log_path(self, ref: RefLike) -> Path:
        ns, name = self._parts(ref)
        return self.logs_dir / ns / name

    # --- locking --------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the exclusive lock on ``refs/.lock`` (not re-entrant: do not nest).

        ``set``, ``delete`` and ``tag`` take it themselves; ``gc`` holds it while it
        marks and sweeps so that no ref can move to an object it is deleting.
        """
        with flock(self.refs_dir / LOCK_NAME):
            yield

    # --- reading --------------------------------------------------------------

    def _read(self, path: Path, label: str) -> tuple[Digest, bool] | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"ref {label} cannot be read ({path}): {exc}", ref=label) from exc
        try:
            return decode_ref(data)
        except (ValueError, KvregError) as exc:
            raise StoreError(
                f"ref {label} is corrupted ({path}): {exc}",
                hint="run 'kvreg fsck'; then set the ref again or delete the file",
                ref=label,
            ) from exc

    def entry(self, ref: RefName) -> RefEntry | None:
        """The ref's entry, or None if it does not exist; ``StoreError`` if its file is corrupted."""
        found = self._read(self._path(ref), str(ref))
        if found is None:
            return None
        return RefEntry(ref=ref, digest=found[0], tag=found[1])

    def get_or_none(self, ref: RefName) -> Digest | None:
        e = self.entry(ref)
        return None if e is None else e.digest

    def get(self, ref: RefName) -> Digest:
        """The manifest digest the ref points at; ``RefNotFoundError`` if it does not exist."""
        e = self.entry(ref)
        if e is None:
            raise RefNotFoundError(
                f"no ref {ref} in the local store",
                hint=f"list the local refs with 'kvreg ls'; pull this one with 'kvreg pull REMOTE {ref}'",
                ref=str(ref),
            )
        return e.digest

    def scan(self) -> tuple[list[RefEntry], list[RefProblem]]:
        """Every readable ref (sorted by name) and every ref file that could not be read."""
        entries: list[RefEntry] = []
        problems: list[RefProblem] = []
        try:
            namespaces = sorted(os.scandir(self.refs_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return entries, problems
        for ns in namespaces:
            if ns.name == LOCK_NAME:
                continue
            if not ns.is_dir(follow_symlinks=False):
                problems.append(RefProblem(ns.name, "not a namespace folder"))
                continue
            for item in sorted(os.scandir(ns.path), key=lambda e: e.name):
                label = f"{ns.name}/{item.name}"
                if not item.is_file(follow_symlinks=False):
                    problems.append(RefProblem(label, "not a regular ref file"))
                    continue
                try:
                    ref = _parse_ref_name(label)
                    found = self._read(Path(item.path), label)
                except KvregError as exc:
                    problems.append(RefProblem(label, exc.message))
                    continue
                if found is not None:  # deleted since the folder was listed
                    entries.append(RefEntry(ref=ref, digest=found[0], tag=found[1]))
        entries.sort(key=lambda e: str(e.ref))
        return entries, problems

    def list(self) -> list[RefEntry]:
        """Every ref, sorted by name; ``StoreError`` if any ref file is corrupted."""
        entries, problems = self.scan()
        if problems:
            p = problems[0]
            raise StoreError(
                f"ref {p.name} is corrupted: {p.message}",
                hint="run 'kvreg fsck' for the full list",
                ref=p.name,
            )
        return entries

    def reflog(self, ref: RefName) -> builtins.list[RefLogEntry]:  # list: the method above
        """The ref's moves, oldest first (empty if it never existed)."""
        try:
            lines = self._log_path(ref).read_text("utf-8").splitlines()
        except FileNotFoundError:
            return []
        out: list[RefLogEntry] = []
        for n, line in enumerate(lines, 1):
            try:
                obj = json.loads(line)
                out.append(
                    RefLogEntry(
                        time=str(obj["time"]),
                        op=str(obj["op"]),
                        old=None if obj["old"] is None else Digest(obj["old"]),
                        new=None if obj["new"] is None else Digest(obj["new"]),
                    )
                )
            except (ValueError, KeyError, TypeError, KvregError) as exc:
                raise StoreError(f"reflog of {ref} is corrupted at line {n}: {exc}", ref=str(ref)) from exc
        return out

    # --- writing --------------------------------------------------------------

    def set(self, ref: RefName, new: Digest, *, expected: Expected = ANY) -> None:
        """Point ``ref`` at ``new`` if it currently matches ``expected``.

        ``expected=ANY`` moves it unconditionally, ``None`` requires that the ref
        does not exist, a digest requires that it points there. Otherwise, or if
        the ref is a tag, raises ``RefConflictError`` and changes nothing.
        """
        new = Digest(new)
        path = self._path(ref)
        with self.lock():
            current = self._read(path, str(ref))
            self._check(ref, current, expected)
            if current is not None and current[0] == new:
                return
            self._write(path, new, tag=False)
            crash_point("client.ref.after_write")
            self._append_log(ref, "create" if current is None else "update", current, new)
        log.info("ref %s -> %s", ref, new)

    def delete(self, ref: RefName, *, expected: Expected = ANY) -> None:
        """Delete ``ref`` (``RefNotFoundError`` if missing, ``RefConflictError`` on CAS failure or tag)."""
        path = self._path(ref)
        with self.lock():
            current = self._read(path, str(ref))
            if current is None:
                raise RefNotFoundError(f"no ref {ref} in the local store", ref=str(ref))
            self._check(ref, current, expected)
            try:
                path.unlink()
                fsync_dir(path.parent)
            except OSError as exc:
                raise StoreError(f"cannot delete ref {ref}: {exc}", ref=str(ref)) from exc
            with contextlib.suppress(OSError):  # only succeeds if empty; safe under the lock
                path.parent.rmdir()
            self._append_log(ref, "delete", current, None)
        log.info("deleted ref %s (was %s)", ref, current[0])

    def tag(self, ref: RefName, digest: Digest, *, expected: Expected = None) -> None:
        """Make ``ref`` an immutable tag on ``digest``.

        By default the ref must not exist yet (``expected=None``); pass the
        current digest (or ``ANY``) to freeze an existing movable ref. Tagging
        again with the same digest is a no-op; any other change to a tag raises
        ``RefConflictError``.
        """
        digest = Digest(digest)
        path = self._path(ref)
        with self.lock():
            current = self._read(path, str(ref))
            if current is not None and current[1] and current[0] == digest:
                return
            self._check(ref, current, expected)
            self._write(path, digest, tag=True)
            self._append_log(ref, "tag", current, digest)
        log.info("tagged %s -> %s", ref, digest)

    # --- internals ------------------------------------------------------------

    @staticmethod
    def _check(ref: RefName, current: tuple[Digest, bool] | None, expected: Expected) -> None:
        cur = None if current is None else current[0]
        details: dict[str, Any] = {
            "ref": str(ref),
            "current": cur,
            "expected": None if expected is None else str(expected),
        }
        if current is not None and current[1]:
            raise RefConflictError(
                f"ref {ref} is an immutable tag on {cur}: it cannot be moved or deleted", **details
            )
        if expected is ANY:
            return
        if expected is None:
            if cur is not None:
                raise RefConflictError(f"ref {ref} exists already (at {cur}); expected it not to", **details)
            return
        if cur is None:
            raise RefConflictError(f"ref {ref} does not exist; expected it at {expected}", **details)
        if cur != Digest(expected):
            raise RefConflictError(f"ref {ref} is at {cur}, expected {expected}", **details)

    def _write(self, path: Path, digest: Digest, *, tag: bool) -> None:
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(
            path, encode_ref(digest, tag=tag), mode=_TAG_MODE if tag else _REF_MODE, tmp_dir=self.tmp_dir
        )

    def _append_log(self, ref: RefName, op: str, old: tuple[Digest, bool] | None, new: Digest | None) -> None:
        line = json.dumps(
            {"time": _utc_now(), "op": op, "old": None if old is None else str(old[0]), "new": new},
            sort_keys=True,
            separators=(",", ":"),
        )
        try:
            append_durable(self._log_path(ref), line.encode("utf-8") + b"\n")
        except OSError as exc:  # the ref moved; a lost log line must not undo that
            log.error("cannot append to the reflog of %s: %s", ref, exc)
