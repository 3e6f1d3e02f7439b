"""The OCI mapping of a kvreg artifact (``kvreg.core.oci``): built deterministically, parsed
strictly, and checked against the signed manifest so a lying registry is caught."""

from __future__ import annotations

import json

import pytest

from core.manifest_helpers import signed_artifact
from kvreg.core import oci
from kvreg.core.digest import Digest
from kvreg.core.errors import DigestMismatchError, InvalidNameError, ManifestInvalidError
from kvreg.core.keys import SigningKey

_OTHER = str(Digest.of_bytes(b"x"))


@pytest.fixture(scope="module")
def built():  # type: ignore[no-untyped-def]
    key = SigningKey.generate()
    return signed_artifact(
        key,
        list(range(1, 11)),
        [b"chunk-a" * 10, b"chunk-b" * 11, b"chunk-c"],
        text=b"the answer is 42",
        logits=b"\x00" * 128,
        prompt=(b"what is it?", 3),
        annotations={"title": "forty-two", "question": "what is it?"},
    )


def test_artifact_manifest_is_deterministic_and_names_every_object(built) -> None:  # type: ignore[no-untyped-def]
    raw = oci.artifact_manifest(built.manifest, {})
    assert raw == oci.artifact_manifest(built.manifest, {})
    doc = json.loads(raw)
    assert doc["mediaType"] == oci.OCI_MANIFEST
    assert doc["artifactType"] == oci.ARTIFACT_TYPE
    assert doc["config"] == {
        "mediaType": oci.MEDIA_KVREG_MANIFEST,
        "digest": str(built.digest),
        "size": len(built.manifest.raw_bytes),
    }
    assert [layer["digest"] for layer in doc["layers"]] == [str(d) for d in built.manifest.object_digests()]
    for layer in doc["layers"]:  # sizes are the real sizes of the bytes
        assert layer["size"] == len(built.objects[Digest(layer["digest"])])
    titles = [layer["annotations"][oci.ANNOTATION_TITLE] for layer in doc["layers"]]
    assert titles[:3] == ["chunk-00000.safetensors", "chunk-00001.safetensors", "chunk-00002.safetensors"]
    assert len(set(titles)) == len(titles)
    notes = doc["annotations"]
    assert notes[oci.ANNOTATION_TITLE] == "forty-two"
    assert notes[oci.ANNOTATION_VERDICT] == "pass"
    assert notes[oci.ANNOTATION_MANIFEST] == str(built.digest)
    assert oci.ANNOTATION_IMMUTABLE not in notes
    tagged = oci.parse_artifact_manifest(oci.artifact_manifest(built.manifest, {}, immutable=True))
    assert tagged.immutable


def test_parse_and_check_round_trip(built) -> None:  # type: ignore[no-untyped-def]
    raw = oci.artifact_manifest(built.manifest, {})
    parsed = oci.parse_artifact_manifest(raw)
    assert parsed.digest == Digest.of_bytes(raw)
    assert parsed.kvreg_manifest == built.digest
    assert not parsed.immutable
    oci.check_artifact(parsed, built.manifest)


def _edited(raw: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    doc = json.loads(raw)
    edit(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda doc: doc["layers"].reverse(), id="order"),
        pytest.param(lambda doc: doc["layers"].pop(0), id="missing"),
        pytest.param(
            lambda doc: doc["layers"].__setitem__(
                0, {**doc["layers"][0], "digest": str(Digest.of_bytes(b"x"))}
            ),
            id="swapped",
        ),
        pytest.param(lambda doc: doc["layers"].__setitem__(0, {**doc["layers"][0], "size": 1}), id="size"),
        pytest.param(
            lambda doc: doc["config"].__setitem__("digest", str(Digest.of_bytes(b"y"))), id="config"
        ),
    ],
)
def test_a_lying_artifact_manifest_is_an_integrity_error(built, edit) -> None:  # type: ignore[no-untyped-def]
    parsed = oci.parse_artifact_manifest(_edited(oci.artifact_manifest(built.manifest, {}), edit))
    with pytest.raises(DigestMismatchError):
        oci.check_artifact(parsed, built.manifest)


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'{"schemaVersion": 1, "layers": []}',
        b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "layers": []}',
        b'{"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.empty.v1+json", '
        b'"digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2}, '
        b'"layers": []}',
        b'{"schemaVersion": 2, "config": {"mediaType": "application/vnd.kvreg.manifest.v1+json", '
        b'"digest": "md5:00", "size": 2}, "layers": []}',
        b'{"schemaVersion": 2, "config": {"mediaType": "application/vnd.kvreg.manifest.v1+json", '
        b'"digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": -1}, '
        b'"layers": []}',
        b'{"schemaVersion": 2, "schemaVersion": 2, "layers": []}',
    ],
)
def test_malformed_artifact_manifests_are_refused(raw: bytes) -> None:
    with pytest.raises(ManifestInvalidError):
        oci.parse_artifact_manifest(raw)


def test_signature_manifest_and_referrers_index_round_trip(built) -> None:  # type: ignore[no-untyped-def]
    artifact = oci.parse_artifact_manifest(oci.artifact_manifest(built.manifest, {}))
    envelope = oci.Descriptor(
        oci.MEDIA_DSSE_ENVELOPE, Digest.of_bytes(built.envelope_bytes), len(built.envelope_bytes)
    )
    raw = oci.signature_manifest(artifact.descriptor(), envelope, kvreg_manifest=built.digest)
    sig = oci.parse_signature_manifest(raw)
    assert sig.subject.digest == artifact.digest and sig.subject.size == len(artifact.raw)
    assert sig.envelope.digest == envelope.digest
    assert json.loads(raw)["config"]["digest"] == str(Digest.of_bytes(oci.EMPTY_CONFIG_DATA))
    entry = oci.Descriptor(oci.OCI_MANIFEST, sig.digest, len(raw), oci.SIGNATURE_TYPE)
    index = oci.referrers_index([entry, entry])
    assert oci.parse_index(index) == [entry]
    with pytest.raises(ManifestInvalidError):
        oci.parse_signature_manifest(oci.artifact_manifest(built.manifest, {}))
    assert oci.referrers_tag(artifact.digest) == "sha256-" + artifact.digest.hex


def test_names() -> None:
    assert oci.repository_for("", "team") == "team"
    assert oci.repository_for("kv/cache", "team-a") == "kv/cache/team-a"
    assert oci.tag_for("p07.v2") == "p07.v2"
    for bad_namespace in ["a_", "a___b", "-a"]:
        with pytest.raises(InvalidNameError):
            oci.repository_for("kv", bad_namespace)
    for bad_prefix in ["Kv", "kv//x", "kv/", "../x"]:
        with pytest.raises(InvalidNameError):
            oci.validate_repository_prefix(bad_prefix)
    with pytest.raises(InvalidNameError):
        oci.tag_for("sha256-" + "0" * 64)


def test_unknown_object_size_must_be_given(built) -> None:  # type: ignore[no-untyped-def]
    # every object of this artifact has a stated size; a contradicting given size is refused
    tokens = built.manifest.tokens.digest
    with pytest.raises(DigestMismatchError):
        oci.artifact_manifest(built.manifest, {tokens: 1})
