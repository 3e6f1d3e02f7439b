"""The client's TLS settings: the default trust store, or a private CA from SSL_CERT_FILE."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kvreg.remote.session import _tls_verify


def test_default_and_explicit_verify_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert _tls_verify(True) is True
    assert _tls_verify(False) is False
    assert _tls_verify("/some/bundle.pem") == "/some/bundle.pem"


def _self_signed_ca(path: Path) -> None:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kvreg test CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_ssl_cert_file_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cert = tmp_path / "ca.pem"
    _self_signed_ca(cert)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = _tls_verify(True)
    assert isinstance(context, ssl.SSLContext)
    assert any(c.get("subject") == ((("commonName", "kvreg test CA"),),) for c in context.get_ca_certs())
