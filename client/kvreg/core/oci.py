"""How a kvreg artifact is laid out in an OCI registry (image-spec 1.1 artifact guidance).

A kvreg object is an OCI blob with the same SHA-256 digest, so the mapping only
adds the two small JSON documents OCI needs (``docs/formats.md`` § OCI):

- the **artifact manifest**: an OCI image manifest whose ``artifactType`` is
  :data:`ARTIFACT_TYPE`, whose config blob is the kvreg manifest itself (its exact
  bytes, the envelope's payload, media type :data:`MEDIA_KVREG_MANIFEST`), and whose
  layers are the manifest's objects in ``Manifest.object_digests()`` order, each
  with a kvreg media type and an ``org.opencontainers.image.title`` so that generic
  tools (``oras pull``) write them out as files;
- the **signature manifest**: an image manifest with the empty config, one layer
  (the DSSE envelope, :data:`MEDIA_DSSE_ENVELOPE`) and ``subject`` = the artifact
  manifest, found through the referrers API or, where a registry lacks it, the
  referrers tag schema: an image index tagged :func:`referrers_tag` of the subject.

kvreg ref ``ns/name`` is tag ``name`` of repository ``<prefix>/ns``
(:func:`repository_for`, :func:`tag_for`). Documents are written as RFC 8785
canonical JSON, so the same artifact always maps to the same manifest digest.

This module builds and parses those documents strictly (an untrusted registry
sends them) and checks an artifact manifest against the signed kvreg manifest. It
does no I/O, verifies no signature (``kvreg.core.envelope`` does) and knows
nothing of HTTP or authentication (``kvreg.remote.oci``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvreg.core.canonical import canonical_json, parse_json_object
from kvreg.core.digest import Digest, is_digest
from kvreg.core.errors import DigestMismatchError, InvalidNameError, ManifestInvalidError
from kvreg.core.manifest import Manifest
from kvreg.core.names import validate_name, validate_namespace

__all__ = [
    "ANNOTATION_CREATED",
    "ANNOTATION_IMMUTABLE",
    "ANNOTATION_MANIFEST",
    "ANNOTATION_TITLE",
    "ARTIFACT_TYPE",
    "EMPTY_CONFIG",
    "EMPTY_CONFIG_DATA",
    "MAX_OCI_MANIFEST_BYTES",
    "MEDIA_DSSE_ENVELOPE",
    "MEDIA_KVREG_MANIFEST",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "SIGNATURE_TYPE",
    "ArtifactManifest",
    "Descriptor",
    "SignatureManifest",
    "artifact_manifest",
    "check_artifact",
    "parse_artifact_manifest",
    "parse_index",
    "parse_signature_manifest",
    "referrers_index",
    "referrers_tag",
    "repository_for",
    "signature_manifest",
    "stated_sizes",
    "tag_for",
    "validate_repository_prefix",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"

#: ``artifactType`` of the manifest that carries one kvreg artifact.
ARTIFACT_TYPE = "application/vnd.kvreg.artifact.v1+json"
#: ``artifactType`` of the manifest that carries a DSSE envelope signing one.
SIGNATURE_TYPE = "application/vnd.kvreg.signature.v1+json"
#: Media type of the config blob: the kvreg manifest (the envelope's payload type).
MEDIA_KVREG_MANIFEST = "application/vnd.kvreg.manifest.v1+json"
MEDIA_CHUNK = "application/vnd.kvreg.chunk.v1+safetensors"
MEDIA_TOKENS = "application/vnd.kvreg.tokens.v1"
MEDIA_TEXT = "application/vnd.kvreg.text.v1"
MEDIA_PROMPT = "application/vnd.kvreg.prompt.v1"
MEDIA_MESSAGES = "application/vnd.kvreg.messages.v1+json"
MEDIA_WITNESS = "application/vnd.kvreg.witness-logits.v1"
#: The DSSE envelope's media type (as in-toto and Sigstore name it).
MEDIA_DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"

ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_DESCRIPTION = "org.opencontainers.image.description"
#: The kvreg manifest digest, on both manifests (lets a reader match them without the config).
ANNOTATION_MANIFEST = "dev.kvreg.manifest"
#: ``"true"`` on an artifact pushed as a kvreg immutable tag: kvreg clients refuse to move it.
ANNOTATION_IMMUTABLE = "dev.kvreg.immutable"
ANNOTATION_MODEL = "dev.kvreg.model"
ANNOTATION_VERDICT = "dev.kvreg.verdict"
ANNOTATION_VERIFIER = "dev.kvreg.verifier"

#: The empty config blob (image-spec 1.1 "guidance for an empty descriptor").
EMPTY_CONFIG_DATA = b"{}"

#: Largest manifest or index kvreg writes or reads: distribution's default limit (4 MiB).
MAX_OCI_MANIFEST_BYTES = 4 * 1024 * 1024

# distribution-spec: a repository name is path components of [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*.
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*", re.ASCII)
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}", re.ASCII
)
_FALLBACK_TAG = re.compile(r"sha256-[0-9a-f]{64}", re.ASCII)
_MAX_REPOSITORY = 255


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI content descriptor: what a manifest says about one blob or manifest."""

    media_type: str
    digest: Digest
    size: int
    artifact_type: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": str(self.digest), "size": self.size}
        if self.artifact_type is not None:
            out["artifactType"] = self.artifact_type
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


EMPTY_CONFIG = Descriptor(OCI_EMPTY, Digest.of_bytes(EMPTY_CONFIG_DATA), len(EMPTY_CONFIG_DATA))


@dataclass(frozen=True, slots=True)
class ArtifactManifest:
    """A parsed artifact manifest: the kvreg manifest (config) and its objects (layers)."""

    raw: bytes
    digest: Digest
    config: Descriptor
    layers: tuple[Descriptor, ...]
    annotations: dict[str, str]

    @property
    def kvreg_manifest(self) -> Digest:
        return self.config.digest

    @property
    def immutable(self) -> bool:
        return self.annotations.get(ANNOTATION_IMMUTABLE) == "true"

    def descriptor(self) -> Descriptor:
        """This manifest as the ``subject`` of its signature (or an entry of an index)."""
        return Descriptor(OCI_MANIFEST, self.digest, len(self.raw), ARTIFACT_TYPE)


@dataclass(frozen=True, slots=True)
class SignatureManifest:
    """A parsed signature manifest: the envelope blob and the artifact manifest it is about."""

    raw: bytes
    digest: Digest
    envelope: Descriptor
    subject: Descriptor
    annotations: dict[str, str]


# --- names ------------------------------------------------------------------------


def validate_repository_prefix(prefix: str) -> str:
    """Return ``prefix`` (``""`` or ``a/b``) if it is valid OCI repository path, else raise."""
    if prefix == "":
        return prefix
    for part in prefix.split("/"):
        if _PATH_COMPONENT.fullmatch(part) is None:
            raise InvalidNameError(
                f"invalid OCI repository prefix {prefix!r}: component {part!r} is not allowed",
                hint="components are lowercase letters and digits, joined by '.', '_', '__' or dashes",
            )
    return prefix


def repository_for(prefix: str, namespace: str) -> str:
    """The OCI repository that holds kvreg namespace ``namespace``: ``<prefix>/<namespace>``."""
    validate_namespace(namespace)
    validate_repository_prefix(prefix)
    if _PATH_COMPONENT.fullmatch(namespace) is None:
        raise InvalidNameError(
            f"namespace {namespace!r} cannot be an OCI repository name component",
            hint="OCI allows '_', '__' or dashes only between letters or digits; use another namespace",
        )
    repository = f"{prefix}/{namespace}" if prefix else namespace
    if len(repository) > _MAX_REPOSITORY:
        raise InvalidNameError(f"OCI repository {repository!r} is longer than {_MAX_REPOSITORY} characters")
    return repository


def tag_for(name: str) -> str:
    """The OCI tag of kvreg ref name ``name`` (the same string; kvreg names are valid tags).

    Names of the referrers tag schema (``sha256-<64 hex>``) are refused: that tag
    belongs to the signatures of a manifest."""
    validate_name(name)
    if _FALLBACK_TAG.fullmatch(name):
        raise InvalidNameError(
            f"ref name {name!r} is reserved on OCI registries (the referrers tag of a manifest)",
            hint="choose another name",
        )
    return name


def referrers_tag(digest: Digest) -> str:
    """The referrers tag schema's tag for the referrers of manifest ``digest``: ``sha256-<hex>``."""
    return f"sha256-{digest.hex}"


# --- building ---------------------------------------------------------------------


def _object_layers(manifest: Manifest, sizes: Mapping[Digest, int]) -> list[Descriptor]:
    kinds: dict[Digest, tuple[str, str]] = {}

    def note(d: Digest, media: str, title: str) -> None:
        kinds.setdefault(d, (media, title))

    for c in manifest.chunks:
        note(c.digest, MEDIA_CHUNK, f"chunk-{c.index:05d}.safetensors")
    note(manifest.tokens.digest, MEDIA_TOKENS, "tokens.u32le")
    note(manifest.text.digest, MEDIA_TEXT, "text.txt")
    note(manifest.witness.logits_digest, MEDIA_WITNESS, "witness-logits.bin")
    if manifest.prompt is not None:
        note(manifest.prompt.digest, MEDIA_PROMPT, "prompt.txt")
        if manifest.prompt.chat is not None:
            note(manifest.prompt.chat.messages, MEDIA_MESSAGES, "messages.json")
    stated = stated_sizes(manifest)
    layers = []
    for d in manifest.object_digests():
        size = stated.get(d, sizes.get(d))
        if size is None:
            raise ManifestInvalidError(f"the size of object {d} is not known", digest=str(d))
        if d in stated and d in sizes and sizes[d] != stated[d]:
            raise DigestMismatchError(
                f"object {d} is {sizes[d]} bytes but the manifest states {stated[d]}", digest=str(d)
            )
        media, title = kinds[d]
        layers.append(Descriptor(media, d, size, annotations={ANNOTATION_TITLE: title}))
    return layers


def stated_sizes(manifest: Manifest) -> dict[Digest, int]:
    """Object sizes the signed manifest fixes: :meth:`Manifest.stated_sizes` and the witness
    logits (from their shape and dtype). Only a chat prompt's messages are not stated."""
    sizes = manifest.stated_sizes()
    witness = manifest.witness_size()
    if witness is not None:
        sizes.setdefault(manifest.witness.logits_digest, witness)
    return sizes


def _artifact_annotations(manifest: Manifest, *, immutable: bool) -> dict[str, str]:
    notes: dict[str, str] = {ANNOTATION_MANIFEST: str(manifest.digest), ANNOTATION_MODEL: manifest.model.name}
    title = manifest.annotations.get("title")
    if isinstance(title, str) and title:
        notes[ANNOTATION_TITLE] = title
    question = manifest.annotations.get("question")
    if isinstance(question, str) and question:
        notes[ANNOTATION_DESCRIPTION] = question[:1000]
    if manifest.created:
        notes[ANNOTATION_CREATED] = manifest.created
    if manifest.verification is not None:
        notes[ANNOTATION_VERDICT] = manifest.verification.verdict
        notes[ANNOTATION_VERIFIER] = manifest.verification.verifier
    if immutable:
        notes[ANNOTATION_IMMUTABLE] = "true"
    return notes


def artifact_manifest(manifest: Manifest, sizes: Mapping[Digest, int], *, immutable: bool = False) -> bytes:
    """The OCI image manifest (canonical JSON bytes) that carries ``manifest`` and its objects.

    ``sizes`` gives the size of every object the manifest does not state (a chat
    prompt's messages); stated sizes are taken from the manifest and a different
    ``sizes`` entry raises ``DigestMismatchError``. ``immutable`` marks a kvreg tag.
    The same arguments always give the same bytes."""
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": Descriptor(MEDIA_KVREG_MANIFEST, manifest.digest, len(manifest.raw_bytes)).to_dict(),
        "layers": [layer.to_dict() for layer in _object_layers(manifest, sizes)],
        "annotations": _artifact_annotations(manifest, immutable=immutable),
    }
    return _write(doc)


def signature_manifest(subject: Descriptor, envelope: Descriptor, *, kvreg_manifest: Digest) -> bytes:
    """The OCI image manifest (canonical JSON bytes) that attaches a DSSE envelope to ``subject``."""
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SIGNATURE_TYPE,
        "config": EMPTY_CONFIG.to_dict(),
        "layers": [Descriptor(MEDIA_DSSE_ENVELOPE, envelope.digest, envelope.size).to_dict()],
        "subject": Descriptor(OCI_MANIFEST, subject.digest, subject.size).to_dict(),
        "annotations": {ANNOTATION_MANIFEST: str(kvreg_manifest)},
    }
    return _write(doc)


def referrers_index(referrers: Iterable[Descriptor]) -> bytes:
    """An OCI image index listing ``referrers`` (each once, first kept), as the referrers API
    answers and the referrers tag schema stores."""
    seen: set[Digest] = set()
    manifests = []
    for r in referrers:
        if r.digest not in seen:
            seen.add(r.digest)
            manifests.append(r.to_dict())
    return _write({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})


def _write(doc: dict[str, Any]) -> bytes:
    data = canonical_json(doc, error=ManifestInvalidError)
    if len(data) > MAX_OCI_MANIFEST_BYTES:
        raise ManifestInvalidError(
            f"the OCI manifest would be {len(data)} bytes, more than registries accept "
            f"({MAX_OCI_MANIFEST_BYTES})",
            size=len(data),
        )
    return data


# --- parsing (untrusted input) ----------------------------------------------------


def _bad(what: str, message: str) -> ManifestInvalidError:
    return ManifestInvalidError(f"{what}: {message}")


def _annotations(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _bad(what, "annotations must map strings to strings")
    return dict(value)


def _descriptor(value: Any, what: str) -> Descriptor:
    if not isinstance(value, dict):
        raise _bad(what, "a descriptor must be an object")
    media, digest, size = value.get("mediaType"), value.get("digest"), value.get("size")
    if not isinstance(media, str) or _MEDIA_TYPE.fullmatch(media) is None:
        raise _bad(what, f"bad mediaType {media!r}")
    if not isinstance(digest, str) or not is_digest(digest):
        raise _bad(what, f"bad or non-SHA-256 digest {digest!r}")
    if type(size) is not int or size < 0:
        raise _bad(what, f"bad size {size!r}")
    artifact_type = value.get("artifactType")
    if artifact_type is not None and not isinstance(artifact_type, str):
        raise _bad(what, "artifactType must be a string")
    return Descriptor(
        media, Digest(digest), size, artifact_type, _annotations(value.get("annotations"), what)
    )


def _image_manifest(raw: bytes, what: str) -> dict[str, Any]:
    doc = parse_json_object(raw, what=what, max_bytes=MAX_OCI_MANIFEST_BYTES)
    if doc.get("schemaVersion") != 2 or type(doc.get("schemaVersion")) is not int:
        raise _bad(what, "schemaVersion must be 2")
    if doc.get("mediaType", OCI_MANIFEST) != OCI_MANIFEST:
        raise _bad(what, f"mediaType is {doc.get('mediaType')!r}, not an OCI image manifest")
    if not isinstance(doc.get("layers"), list):
        raise _bad(what, "layers must be a list")
    return doc


def parse_artifact_manifest(raw: bytes) -> ArtifactManifest:
    """Parse an artifact manifest (raises ``ManifestInvalidError``); its digest is of ``raw``."""
    what = "OCI artifact manifest"
    doc = _image_manifest(raw, what)
    artifact_type = doc.get("artifactType")
    config = _descriptor(doc.get("config"), f"{what} config")
    if config.media_type != MEDIA_KVREG_MANIFEST or artifact_type not in (None, ARTIFACT_TYPE):
        raise _bad(
            what,
            f"not a kvreg artifact (artifactType {artifact_type!r}, config mediaType {config.media_type!r})",
        )
    layers = tuple(_descriptor(v, f"{what} layer {i}") for i, v in enumerate(doc["layers"]))
    return ArtifactManifest(
        raw=bytes(raw),
        digest=Digest.of_bytes(raw),
        config=config,
        layers=layers,
        annotations=_annotations(doc.get("annotations"), what),
    )


def parse_signature_manifest(raw: bytes) -> SignatureManifest:
    """Parse a signature manifest (raises ``ManifestInvalidError``)."""
    what = "OCI signature manifest"
    doc = _image_manifest(raw, what)
    if doc.get("artifactType") != SIGNATURE_TYPE:
        raise _bad(what, f"artifactType is {doc.get('artifactType')!r}, not {SIGNATURE_TYPE}")
    layers = [_descriptor(v, f"{what} layer") for v in doc["layers"]]
    if len(layers) != 1 or layers[0].media_type != MEDIA_DSSE_ENVELOPE:
        raise _bad(what, f"must have exactly one layer of type {MEDIA_DSSE_ENVELOPE}")
    if "subject" not in doc:
        raise _bad(what, "has no subject")
    return SignatureManifest(
        raw=bytes(raw),
        digest=Digest.of_bytes(raw),
        envelope=layers[0],
        subject=_descriptor(doc["subject"], f"{what} subject"),
        annotations=_annotations(doc.get("annotations"), what),
    )


def parse_index(raw: bytes) -> list[Descriptor]:
    """The manifests an image index (a referrers list) names (raises ``ManifestInvalidError``)."""
    what = "OCI image index"
    doc = parse_json_object(raw, what=what, max_bytes=MAX_OCI_MANIFEST_BYTES)
    if doc.get("schemaVersion") != 2 or type(doc.get("schemaVersion")) is not int:
        raise _bad(what, "schemaVersion must be 2")
    if doc.get("mediaType", OCI_INDEX) != OCI_INDEX:
        raise _bad(what, f"mediaType is {doc.get('mediaType')!r}, not an OCI image index")
    manifests = doc.get("manifests")
    if not isinstance(manifests, list):
        raise _bad(what, "manifests must be a list")
    return [_descriptor(v, f"{what} entry {i}") for i, v in enumerate(manifests)]


def check_artifact(oci: ArtifactManifest, manifest: Manifest) -> None:
    """Check that ``oci`` carries exactly the signed ``manifest``: its config is the manifest,
    and its layers are the manifest's objects, in order, with the sizes it states.

    Raises ``DigestMismatchError`` (exit 3) otherwise: a swapped, added or missing
    layer is a registry that lies about what the signature covers."""
    if oci.config.digest != manifest.digest or oci.config.size != len(manifest.raw_bytes):
        raise DigestMismatchError(
            f"the OCI manifest {oci.digest} carries kvreg manifest {oci.config.digest}, "
            f"not the signed {manifest.digest}",
            expected=str(manifest.digest),
            actual=str(oci.config.digest),
        )
    expected = manifest.object_digests()
    actual = [layer.digest for layer in oci.layers]
    if actual != expected:
        extra = sorted(set(actual) - set(expected))
        missing = sorted(set(expected) - set(actual))
        raise DigestMismatchError(
            f"the layers of OCI manifest {oci.digest} are not the objects the signed manifest names "
            f"({len(missing)} missing, {len(extra)} not signed"
            + ("" if missing or extra else ", order differs")
            + ")",
            manifest=str(manifest.digest),
            missing=[str(d) for d in missing[:8]],
            unexpected=[str(d) for d in extra[:8]],
        )
    stated = stated_sizes(manifest)
    for layer in oci.layers:
        if layer.digest in stated and stated[layer.digest] != layer.size:
            raise DigestMismatchError(
                f"layer {layer.digest} of OCI manifest {oci.digest} says {layer.size} bytes; "
                f"the signed manifest states {stated[layer.digest]}",
                digest=str(layer.digest),
            )
