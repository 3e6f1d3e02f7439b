"""A CNCF distribution registry behind the Docker token flow, for the Bearer tests.

:func:`token_registry` starts, for one test, a token issuer on loopback (a small
HTTP server that checks Basic credentials and signs JWTs with ES256 under a
self-signed certificate made with ``cryptography``, the certificate in the JWT's
``x5c`` header) and a ``docker-registry`` whose ``auth: token:`` names that issuer
as its realm and that certificate as its ``rootcertbundle``. Both stop when the
test ends. The issuer grants every requested action to the right user and nothing
to anyone else (an anonymous token has no access, as Docker Hub's does); a POST
with the right identity token (``grant_type=refresh_token``) gets an ``access_token``.
``lifetime`` sets how long its tokens last (``exp``) and ``expires_in`` what the answer
says of it (by default the same).

Distribution accepts a token for a minute past its ``exp`` (its leeway): a test that
needs tokens refused the moment they expire puts :class:`ExpiryGate` in front, a
proxy that answers ``401`` with the registry's own challenge to a request whose
token's ``exp`` has passed, as a registry without leeway does.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from .proxy import LoopbackServer, QuietHandler, forward, read_body, relay

SERVICE = "kvreg-token-test"
ISSUER = "kvreg-test-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class TokenRegistry:
    url: str
    user: str
    password: str
    identity: str = ""
    requests: list[dict[str, object]] = field(default_factory=list)
    realm: str = ""


class _Issuer:
    def __init__(
        self,
        user: str,
        password: str,
        key: ec.EllipticCurvePrivateKey,
        cert: x509.Certificate,
        lifetime: int,
    ) -> None:
        self.user, self.password, self.key, self.lifetime = user, password, key, lifetime
        self.x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode("ascii")
        self.requests: list[dict[str, object]] = []
        self.identity = uuid.uuid4().hex  # what `docker login` keeps as an identitytoken
        self.lock = threading.Lock()

    def sign(self, subject: str, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": [self.x5c]}
        claims = {
            "iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + self.lifetime, "nbf": now - 10,
            "iat": now, "jti": uuid.uuid4().hex, "access": access,
        }  # fmt: skip
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def token_registry(
    tmp: Path, *, lifetime: int = 300, expires_in: float | None = None
) -> Iterator[TokenRegistry]:
    """A running registry with token auth and its issuer (see the module docstring)."""
    exe = shutil.which("docker-registry")
    assert exe is not None, "docker-registry is not installed: run `make services` (scripts/services.sh)"
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    bundle = tmp / "token-root.pem"
    bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    issuer = _Issuer("alice", uuid.uuid4().hex, key, cert, lifetime)
    stated = lifetime if expires_in is None else expires_in

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            scopes = [s for value in query.get("scope", []) for s in value.split(" ") if s]
            auth = self.headers.get("Authorization", "")
            user = None
            if auth.startswith("Basic "):
                name, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                if name != issuer.user or secret != issuer.password:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                user = name
            with issuer.lock:
                issuer.requests.append({"user": user, "scopes": scopes, "service": query.get("service")})
            token = issuer.sign(user or "", scopes if user else [])
            body = json.dumps({"token": token, "expires_in": stated}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # OAuth2: an identity (refresh) token for an access token
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            ok = form.get("grant_type") == ["refresh_token"] and form.get("refresh_token") == [
                issuer.identity
            ]
            scopes = [s for value in form.get("scope", []) for s in value.split(" ") if s]
            with issuer.lock:
                issuer.requests.append(
                    {"user": "identity" if ok else None, "scopes": scopes, "service": form.get("service")}
                )
            if not ok:
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            token = issuer.sign(issuer.user, scopes)
            body = json.dumps({"access_token": token, "expires_in": stated}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = LoopbackServer(Handler)
    port = _free_port()
    data = tmp / "token-registry"
    data.mkdir()
    config = tmp / "token-registry.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {data}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}, secret: {uuid.uuid4().hex}}}\n"
        "auth:\n"
        "  token:\n"
        f"    realm: {server.url}/token\n"
        f"    service: {SERVICE}\n"
        f"    issuer: {ISSUER}\n"
        f"    rootcertbundle: {bundle}\n"
    )
    log = (tmp / "token-registry.log").open("wb")
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v2/", timeout=2).status_code == 401:
                    break
            assert proc.poll() is None, (tmp / "token-registry.log").read_text()
            time.sleep(0.1)
        else:
            raise AssertionError("the token registry did not start")
        reg = TokenRegistry(
            url, issuer.user, issuer.password, identity=issuer.identity, realm=f"{server.url}/token"
        )
        reg.requests = issuer.requests
        yield reg
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        server.close()


def _claims(authorization: str) -> dict[str, object] | None:
    """The claims of a ``Bearer`` JWT (not verified: the registry behind the gate does that)."""
    scheme, _, token = authorization.partition(" ")
    parts = token.split(".")
    if scheme.lower() != "bearer" or len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    claims = json.loads(base64.urlsafe_b64decode(payload))
    return claims if isinstance(claims, dict) else None


class ExpiryGate:
    """A proxy in front of a token registry that refuses expired tokens at once (no leeway)
    and holds each blob download back ``delay`` seconds, so that a pull outlives its tokens.

    ``refused`` counts the ``401`` answers it gave."""

    def __init__(self, reg: TokenRegistry, *, delay: float = 0.0) -> None:
        self.refused = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=60)
        gate = self
        challenge = f'Bearer realm="{reg.realm}",service="{SERVICE}",error="invalid_token"'

        class Handler(QuietHandler):
            def _pass(self) -> None:
                body = read_body(self)
                claims = _claims(self.headers.get("Authorization", ""))
                exp = claims.get("exp") if claims else None
                if isinstance(exp, int | float) and time.time() >= exp:
                    with gate._lock:
                        gate.refused += 1
                    payload = b'{"errors": [{"code": "UNAUTHORIZED", "message": "token expired"}]}'
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", challenge)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if delay and self.command == "GET" and "/blobs/sha256:" in self.path:
                    time.sleep(delay)
                relay(self, forward(self, reg.url, body, gate._http))

            do_GET = do_PUT = do_POST = do_PATCH = do_HEAD = do_DELETE = _pass

        self._server = LoopbackServer(Handler)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()
        self._http.close()
