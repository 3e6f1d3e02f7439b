"""Verify an artifact: signature, Merkle root, every object's digest; with a model, recompute it.

:func:`verify` opens the artifact (digest of the manifest, signature, schema,
Merkle root), re-hashes every object the manifest references and the tokens, and
touches what it found (paging). With a model it checks that the model can graft
the artifact (fingerprints) and with ``recompute`` recomputes every chunk and the
witness. The report's ``error`` says what failed (an absent object names how to
get it back; damage points to ``kvreg fsck``; a recomputation that differs is not
byte-exact). This module renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreg.app import keyring
from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback, Silent
from kvreg.app.loader import load_engine
from kvreg.core.digest import Digest
from kvreg.core.errors import (
    DigestMismatchError,
    IntegrityError,
    KvregError,
    NotByteExactError,
    ObjectNotFoundError,
    UsageError,
)
from kvreg.store import absence, access_log
from kvreg.store.artifacts import Artifact, read_tokens
from kvreg.store.home import Home


@dataclass(frozen=True)
class VerifyRequest:
    ref: str
    model: Path | None = None  # also check that this model can graft the artifact
    recompute: bool = False  # recompute every chunk and the witness (needs model)
    engine: EngineOptions = field(default_factory=EngineOptions)


@dataclass
class ObjectCheck:
    """The re-hash of an artifact's objects."""

    checked: int = 0
    bytes_hashed: int = 0
    missing: list[str] = field(default_factory=list)
    corrupt: list[dict[str, str]] = field(default_factory=list)
    tokens_ok: bool = True
    tokens_message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "bytes_hashed": self.bytes_hashed,
            "missing": self.missing,
            "corrupt": self.corrupt,
            "tokens_ok": self.tokens_ok,
            "tokens_message": self.tokens_message,
        }


@dataclass
class VerifyReport:
    ref: str | None
    manifest_digest: str
    merkle_root: str
    token_count: int
    chunk_count: int
    objects: ObjectCheck
    compatible: bool | None = None
    recompute: dict[str, Any] | None = None
    ok: bool = False
    error: KvregError | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "manifest_digest": self.manifest_digest,
            "signature": True,
            "merkle_root": self.merkle_root,
            "merkle_root_ok": True,
            "token_count": self.token_count,
            "chunk_count": self.chunk_count,
            "objects": self.objects.to_dict(),
            "compatible": self.compatible,
            "recompute": self.recompute,
            "ok": self.ok,
        }


def rehash(home: Home, artifact: Artifact) -> ObjectCheck:
    """Re-hash every object the manifest references; collect what is wrong."""
    manifest = artifact.manifest
    result = ObjectCheck()
    sizes = {str(c.digest): c.size for c in manifest.chunks}
    for digest in manifest.object_digests():
        try:
            data = home.objects.read(digest, verify=True)
        except ObjectNotFoundError:
            result.missing.append(str(digest))
            continue
        except DigestMismatchError as e:
            result.corrupt.append({"digest": str(digest), "message": e.message})
            continue
        result.checked += 1
        result.bytes_hashed += len(data)
        expected = sizes.get(str(digest))
        if expected is not None and expected != len(data):
            result.corrupt.append(
                {"digest": str(digest), "message": f"size {len(data)}, the manifest says {expected}"}
            )
    if (
        home.objects.has(manifest.text.digest)
        and home.objects.size(manifest.text.digest) != manifest.text.size
    ):
        result.corrupt.append(
            {"digest": str(manifest.text.digest), "message": "text size differs from the manifest"}
        )
    try:
        read_tokens(home, manifest)
    except (IntegrityError, ObjectNotFoundError) as e:
        result.tokens_ok = False
        result.tokens_message = e.message
    return result


def verify(home: Home, request: VerifyRequest, feedback: Feedback | None = None) -> VerifyReport:
    """Verify ``request.ref``; the report's ``error`` is set when anything is wrong."""
    feedback = feedback or Silent()
    if request.recompute and request.model is None:
        raise UsageError("--recompute needs --model MODEL")
    artifact = keyring.open_verified(home, request.ref)  # digest, signature, schema, Merkle root
    manifest = artifact.manifest
    with feedback.status(f"re-hashing the objects of {artifact.digest.short()}"):
        objects = rehash(home, artifact)
    access_log.touch(home, [d for d in manifest.object_digests() if str(d) not in objects.missing])
    report = VerifyReport(
        ref=str(artifact.ref) if artifact.ref else None,
        manifest_digest=str(artifact.digest),
        merkle_root=str(manifest.merkle_root),
        token_count=manifest.token_count,
        chunk_count=len(manifest.chunks),
        objects=objects,
    )
    problems: list[str] = []
    if objects.missing:
        problems.append(f"{len(objects.missing)} object(s) missing")
    if objects.corrupt:
        problems.append(f"{len(objects.corrupt)} object(s) damaged")
    if not objects.tokens_ok:
        problems.append(f"tokens: {objects.tokens_message}")
    if request.model is not None and not problems:
        fields = request.engine.over_recorded(manifest.config_fields)
        lm, _ = load_engine(feedback, request.model, fields, home)
        # Imported here, not at the top: torch loads after load_engine set the numerics environment.
        from kvreg.engine.check import recompute_artifact
        from kvreg.engine.graft import check_compatible

        check_compatible(lm, manifest)
        report.compatible = True
        if request.recompute:
            with feedback.status(f"recomputing {len(manifest.chunks)} chunks"):
                recomputed = recompute_artifact(lm, manifest, read_tokens(home, manifest)).to_dict()
            report.recompute = recomputed
            if not recomputed["byte_exact"]:
                problems.append(
                    f"recomputed chunks differ: {recomputed['mismatched_chunks']}, witness equal: "
                    f"{recomputed['witness_equal']}"
                )
    report.ok = not problems
    if problems:
        report.error = _failure(home, report, problems)
    return report


def _failure(home: Home, report: VerifyReport, problems: list[str]) -> KvregError:
    objects = report.objects
    if objects.missing and not objects.corrupt:  # absent, not damaged: say how to get it
        error = absence.missing_object_error(
            home, Digest(objects.missing[0]), f"object {objects.missing[0]}", ref=report.ref
        )
        error.message = "verification failed: " + "; ".join(problems) + "; " + error.message
        return error
    if objects.corrupt or objects.missing:
        return DigestMismatchError("verification failed: " + "; ".join(problems), hint="run: kvreg fsck")
    if report.recompute is not None and not report.recompute["byte_exact"]:
        return NotByteExactError("verification failed: " + "; ".join(problems))
    return IntegrityError("verification failed: " + "; ".join(problems))
