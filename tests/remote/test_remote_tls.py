"""The client's TLS settings: the default trust store, or a private CA from SSL_CERT_FILE."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kvreg.core.errors import RemoteError
from kvreg.remote.tls import tls_verify


def test_default_and_explicit_verify_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert tls_verify(True) is True
    assert tls_verify(False) is False
    assert tls_verify("/some/bundle.pem") == "/some/bundle.pem"


def test_ssl_cert_file_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cert, _ = _ca_and_server_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = tls_verify(True)
    assert isinstance(context, ssl.SSLContext)
    assert any(c.get("subject") == ((("commonName", "kvreg test CA"),),) for c in context.get_ca_certs())


def _ca_and_server_cert(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A private CA (its PEM file) and a server context with a certificate it signed for 127.0.0.1."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kvreg test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return ca_path, context


def test_objects_travel_over_tls_with_a_private_ca(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Uploads (no sendfile through TLS: the buffered path) and downloads (TLS buffers data the
    socket no longer shows) of several MiB each, verified against a CA from SSL_CERT_FILE."""
    import hashlib

    from kvreg.core.digest import Digest
    from kvreg.remote.http import RegistryClient

    from .helpers import serve

    ca, server_context = _ca_and_server_cert(tmp_path)
    data = bytes(range(256)) * (9 * 4096 + 7)  # 9 MiB and a bit: more than one buffer
    digest = Digest.from_hex(hashlib.sha256(data).hexdigest())
    path = tmp_path / "object"
    path.write_bytes(data)
    obj = f"/api/v1/namespaces/ns/objects/{digest}"
    with serve(tls=server_context) as srv:
        srv.route(obj, {"digest": digest, "size": len(data), "stored": True}, method="PUT", status=201)
        srv.route(obj, data, ranges=True)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        with RegistryClient(srv.url, "kvreg_" + "t" * 43, timeout=20) as client:
            assert client.put_object("ns", digest, path, len(data)).stored
            got = client.get_object_to("ns", digest, tmp_path / "copy")
        (put,) = srv.requests("PUT")
        assert put.body == data and put.headers["Authorization"].startswith("Bearer ")
    assert got.digest == digest and (tmp_path / "copy").read_bytes() == data
    monkeypatch.delenv("SSL_CERT_FILE")
    with serve(tls=server_context) as srv, RegistryClient(srv.url, None, timeout=20) as client:
        srv.route(obj, data, ranges=True)
        with pytest.raises(RemoteError, match=r"certificate of 127\.0\.0\.1 is not trusted") as refused:
            client.get_object_to("ns", digest, tmp_path / "refused")
        assert "SSL_CERT_FILE" in (refused.value.hint or "")
        assert len(srv.requests()) == 0  # refused in the handshake, not retried


def test_json_requests_verify_https_and_plain_http_loads_no_trust_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The registry's JSON requests over https are verified with the CA of SSL_CERT_FILE (and
    refused without it); a plain-http session never builds a TLS context (it would load a trust
    store for nothing)."""
    from kvreg.remote.http import RegistryClient

    from .helpers import serve

    ca, server_context = _ca_and_server_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    with serve(tls=server_context) as srv:
        srv.route("/api/v1/whoami", {"user": "alice"})
        with RegistryClient(srv.url, "kvreg_" + "t" * 43, timeout=20) as client:
            assert client.whoami() == {"user": "alice"}
        monkeypatch.delenv("SSL_CERT_FILE")
        with RegistryClient(srv.url, "kvreg_" + "t" * 43, timeout=20) as client:
            with pytest.raises(RemoteError, match=r"certificate of 127\.0\.0\.1 is not trusted") as refused:
                client.whoami()
            assert "SSL_CERT_FILE" in (refused.value.hint or "")
        assert len(srv.requests()) == 1  # the refused one never got past the handshake, nor retried

    built: list[object] = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(a) or real(*a, **k))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    with serve() as srv:
        srv.route("/api/v1/whoami", {"user": "bob"})
        with RegistryClient(srv.url, "kvreg_" + "t" * 43, timeout=20) as client:
            assert client.whoami() == {"user": "bob"}
    assert built == []
