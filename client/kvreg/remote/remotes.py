"""Remotes and their credentials: ``config.json`` and ``credentials.json`` in ``$KVREG_HOME``.

Remotes live in ``$KVREG_HOME/config.json`` under ``"remotes"``::

    {"remotes": {"origin": {"url": "https://registry.example.org"}}, ...}

Every other key of that file is kept as it is: this module reads the whole
document, changes ``remotes`` and writes it back atomically
(``kvreg.fileio.atomicfile``), under an exclusive lock so that two concurrent
``kvreg remote add`` do not lose each other's change.

A remote may carry ``"max_checkpoint_age"``: the age in seconds beyond which a
signed checkpoint of its audit log is refused as stale (a frozen registry,
``kvreg.remote.auditlog``); ``0`` turns the check off, an absent key means
:data:`DEFAULT_MAX_CHECKPOINT_AGE` (24 hours). ``kvreg remote add --max-checkpoint-age``
sets it; :func:`parse_age` reads ``90s``, ``30m``, ``24h``, ``7d``, plain seconds or ``off``.

Tokens live apart, in ``$KVREG_HOME/credentials.json`` (``{NAME: {"token": T}}``),
mode 0600. A credentials file that group or others can read is refused with the
``chmod`` that fixes it, like a private key. Tokens are never printed and never
logged; ``Credentials`` and ``RemoteAuth`` show them as ``***`` in ``repr``.

The environment variable ``KVREG_TOKEN``, when set and not empty, is the token for
every remote and takes precedence over ``credentials.json`` (for scripts and CI,
where writing a credentials file is awkward).

Remote names are ``[A-Za-z0-9][A-Za-z0-9._-]{0,63}`` (no ``..``; ``kvreg.core.remote_names``); URLs are
``http://`` or ``https://`` with a host, no user info, query or fragment. A URL
may name the server root or its API root (``.../api/v1``); both are stored as the
server root.

**OCI remotes.** A remote may be an OCI registry (Docker's, Harbor, GHCR, ECR,
CNCF distribution...): its URL is ``oci://HOST[:PORT]/REPOSITORY-PREFIX`` and its
entry says ``"kind": "oci"`` (``"insecure": true`` for plain HTTP, which
:meth:`RemoteConfig.add` allows for a loopback host only, unless forced).
:func:`parse_oci_url` reads such a URL. Its credentials in ``credentials.json`` are
a user name and a password or token (``{NAME: {"username": U, "password": P}}``,
:meth:`Credentials.set_basic`); ``kvreg.remote.oci.dockerconfig`` also reads the
files of Docker and Podman.

This module does not talk to registries: ``kvreg.remote.http`` does, and its
:func:`~kvreg.remote.http.connect` builds a client for a named remote from what is stored here.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvreg.core.errors import AlreadyExistsError, ConfigError, NotFoundError, UsageError
from kvreg.core.loopback import is_loopback
from kvreg.core.oci import repository_for
from kvreg.core.remote_names import validate_remote_name
from kvreg.store import jsonfile
from kvreg.store.home import Home

log = logging.getLogger(__name__)

__all__ = [
    "CREDENTIALS_NAME",
    "DEFAULT_MAX_CHECKPOINT_AGE",
    "KIND_KVREG",
    "KIND_OCI",
    "TOKEN_ENV_VAR",
    "BasicCredentials",
    "Credentials",
    "OciLocation",
    "Remote",
    "RemoteAuth",
    "RemoteConfig",
    "normalize_url",
    "parse_age",
    "parse_oci_url",
    "validate_token",
]

TOKEN_ENV_VAR = "KVREG_TOKEN"
CREDENTIALS_NAME = "credentials.json"
API_PREFIX = "/api/v1"
# Header-safe token characters (RFC 6750 b64token); kvreg tokens are ``kvreg_<43 chars>``.
_TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]{1,1024}=*", re.ASCII)
DEFAULT_MAX_CHECKPOINT_AGE = 24 * 3600
MAX_CHECKPOINT_AGE_LIMIT = 10 * 365 * 24 * 3600  # ten years: any larger value is a typo
_AGE_RE = re.compile(r"([0-9]{1,12})([smhd]?)", re.ASCII)
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_CONFIG_MODE = 0o644
KIND_KVREG = "kvreg"
KIND_OCI = "oci"
OCI_SCHEME = "oci://"
_OCI_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*", re.ASCII)
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]", re.ASCII)
_CREDENTIALS_MODE = 0o600


def normalize_url(url: str) -> str:
    """The registry's root URL: http(s), a host, no credentials, query or fragment, no trailing ``/``.

    A trailing ``/api/v1`` is removed (the client adds it). Raises ``ConfigError``.
    """
    hint = (
        "give the registry's address, e.g. https://registry.example.org or http://127.0.0.1:8080 "
        "(a kvreg registry), or oci://ghcr.io/my-org/kv (an OCI registry)"
    )
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("the registry URL is empty", hint=hint)
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a bad port
    except ValueError as e:
        raise ConfigError(f"invalid registry URL {url!r}: {e}", hint=hint) from e
    scheme = parts.scheme.lower()
    if scheme == "oci":  # "oci:/host" or "oci:host": a mistyped OCI remote
        raise ConfigError(
            f"OCI remote URL {url!r} must start with {OCI_SCHEME}",
            hint="give the registry as oci://HOST[:PORT]/REPOSITORY-PREFIX, e.g. oci://ghcr.io/my-org/kv",
        )
    if scheme not in ("http", "https"):
        raise ConfigError(
            f"registry URL {url!r} must start with http://, https:// or oci://"
            + (f", not {parts.scheme}://" if parts.scheme else ""),
            hint=hint,
        )
    if not parts.hostname:
        raise ConfigError(f"registry URL {url!r} has no host", hint=hint)
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"registry URL {url!r} holds user credentials",
            hint="remove them from the URL and log in with: kvreg login NAME --token TOKEN",
        )
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ConfigError(f"registry URL {url!r} must not have a query or a fragment", hint=hint)
    if any(c.isspace() for c in text) or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ConfigError(f"registry URL {url!r} contains whitespace or control characters", hint=hint)
    path = parts.path.rstrip("/")
    if path.endswith(API_PREFIX):
        path = path[: -len(API_PREFIX)]
    host = parts.hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((scheme, netloc, path, "", ""))


#: The names Docker Hub goes by (``docker login`` keeps its credentials under
#: ``https://index.docker.io/v1/``, Podman under ``docker.io``); its API answers at
#: :data:`DOCKER_HUB_API`.
DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")
DOCKER_HUB_API = "registry-1.docker.io"
#: The server name Docker's credential helpers know Docker Hub by.
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"


@dataclass(frozen=True, slots=True)
class OciLocation:
    """Where an OCI remote is: ``host`` (with ``:port`` if given), the repository ``prefix``
    (``""``: namespaces are top-level repositories) and whether it speaks plain HTTP."""

    host: str
    prefix: str
    insecure: bool = False

    @property
    def is_docker_hub(self) -> bool:
        """Whether this is Docker Hub, under any of its names (:data:`DOCKER_HUB_NAMES`)."""
        return self.host in DOCKER_HUB_NAMES

    @property
    def api_host(self) -> str:
        """The host requests go to: ``host``, but :data:`DOCKER_HUB_API` for Docker Hub."""
        return DOCKER_HUB_API if self.is_docker_hub else self.host

    @property
    def base_url(self) -> str:
        """The registry's root (``https://host[:port]``; ``http://`` when insecure)."""
        return f"{'http' if self.insecure else 'https'}://{self.api_host}"

    def repository(self, namespace: str) -> str:
        """The repository of kvreg namespace ``namespace``: ``<prefix>/<namespace>``; on Docker
        Hub a name of one component is an official image's, ``library/<name>``."""
        name = repository_for(self.prefix, namespace)
        return f"library/{name}" if self.is_docker_hub and "/" not in name else name

    @property
    def hostname(self) -> str:
        """The host without its port (brackets kept off an IPv6 literal)."""
        return urlsplit(f"//{self.host}").hostname or self.host

    @property
    def url(self) -> str:
        return f"{OCI_SCHEME}{self.host}" + (f"/{self.prefix}" if self.prefix else "")


def parse_oci_url(url: str, *, insecure: bool = False) -> OciLocation:
    """``oci://HOST[:PORT][/PREFIX]`` as an :class:`OciLocation`; ``ConfigError`` if malformed."""
    hint = "give the registry as oci://HOST[:PORT]/REPOSITORY-PREFIX, e.g. oci://ghcr.io/my-org/kv"
    text = url.strip() if isinstance(url, str) else ""
    if not text.lower().startswith(OCI_SCHEME):
        raise ConfigError(f"OCI remote URL {url!r} must start with {OCI_SCHEME}", hint=hint)
    rest = text[len(OCI_SCHEME) :].rstrip("/")
    host, _, prefix = rest.partition("/")
    try:
        parts = urlsplit(f"//{host}")
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"invalid OCI remote URL {url!r}: {e}", hint=hint) from e
    if not host or "@" in host or _HOST.fullmatch(host.rsplit(":", 1)[0] if port else host) is None:
        raise ConfigError(f"OCI remote URL {url!r} has no valid host", hint=hint)
    if any(c in prefix for c in "?#@ ") or any(
        _OCI_COMPONENT.fullmatch(p) is None for p in prefix.split("/") if prefix
    ):
        raise ConfigError(
            f"OCI remote URL {url!r}: the repository prefix {prefix!r} is not a valid OCI repository path",
            hint="components are lowercase letters and digits, joined by '.', '_', '__' or dashes",
        )
    name = (parts.hostname or host).lower()
    if ":" in name:
        name = f"[{name}]"
    return OciLocation(name if port is None else f"{name}:{port}", prefix, insecure)


def validate_token(token: str) -> str:
    """Return ``token`` stripped of surrounding whitespace if it can be sent as a bearer token.

    The error never repeats the token.
    """
    if not isinstance(token, str):
        raise UsageError("the token must be a string")
    value = token.strip()
    if not value:
        raise UsageError(
            "the token is empty", hint="pass it with --token TOKEN or on stdin with --token-stdin"
        )
    if _TOKEN_RE.fullmatch(value) is None:
        raise UsageError(
            "the token contains characters a bearer token cannot hold (whitespace, quotes, ...)",
            hint="registry tokens look like kvreg_<43 characters>; copy it again",
        )
    return value


def parse_age(text: str) -> int:
    """Seconds from ``90s``, ``30m``, ``24h``, ``7d``, plain seconds, or ``off`` (0); ``UsageError``."""
    value = text.strip().lower() if isinstance(text, str) else ""
    if value in ("off", "none", "never"):
        return 0
    match = _AGE_RE.fullmatch(value)
    seconds = int(match.group(1)) * _AGE_UNITS[match.group(2)] if match else -1
    if not 0 <= seconds <= MAX_CHECKPOINT_AGE_LIMIT:
        raise UsageError(
            f"invalid age {text!r}",
            hint="a number of seconds, or with a unit: 90s, 30m, 24h, 7d (at most ten years); off: no limit",
        )
    return seconds


@dataclass(frozen=True, slots=True)
class Remote:
    """A named registry: ``name``, the server's root ``url`` and the maximum age in seconds of its
    audit-log checkpoints (0: not checked)."""

    name: str
    url: str
    max_checkpoint_age: int = DEFAULT_MAX_CHECKPOINT_AGE
    kind: str = KIND_KVREG
    insecure: bool = False

    @property
    def api_url(self) -> str:
        return self.url + API_PREFIX

    @property
    def is_oci(self) -> bool:
        return self.kind == KIND_OCI

    @property
    def oci(self) -> OciLocation:
        """Where an OCI remote is (``UsageError`` for a kvreg remote)."""
        if not self.is_oci:
            raise UsageError(f"remote {self.name!r} is a kvreg registry, not an OCI registry")
        return parse_oci_url(self.url, insecure=self.insecure)


@dataclass(frozen=True, slots=True)
class BasicCredentials:
    """A user name and a password (or a registry token used as one), or an identity token
    (``username`` None) that an OCI token service exchanges for access tokens; ``source``
    says where they came from. Shown as ``***`` in ``repr``."""

    username: str | None
    password: str
    source: str

    def __repr__(self) -> str:
        return f"BasicCredentials(username={self.username!r}, password='***', source={self.source!r})"


@dataclass(frozen=True, slots=True)
class RemoteAuth:
    """The token to use for a remote and where it came from (``credentials`` or ``env``)."""

    token: str
    source: str

    def __repr__(self) -> str:
        return f"RemoteAuth(token='***', source={self.source!r})"


# --- files ------------------------------------------------------------------------------


class RemoteConfig:
    """The ``remotes`` section of ``$KVREG_HOME/config.json``."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.path = home.config_path

    def __repr__(self) -> str:
        return f"RemoteConfig({str(self.path)!r})"

    def _remotes(self, doc: dict[str, Any]) -> dict[str, Any]:
        remotes = doc.get("remotes", {})
        if not isinstance(remotes, dict):
            raise ConfigError(f"config {self.path}: 'remotes' must be an object", hint=f"fix {self.path}")
        return remotes

    def _parse(self, name: str, entry: Any) -> Remote:
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise ConfigError(
                f"config {self.path}: remotes.{name} must be an object with a 'url' string",
                hint=f"fix it, or remove and add it again: kvreg remote remove {name}",
            )
        try:
            validate_remote_name(name)
        except UsageError as e:
            raise ConfigError(f"config {self.path}: {e.message}", hint=e.hint) from e
        age = entry.get("max_checkpoint_age", DEFAULT_MAX_CHECKPOINT_AGE)
        if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age <= MAX_CHECKPOINT_AGE_LIMIT:
            raise ConfigError(
                f"config {self.path}: remotes.{name}.max_checkpoint_age must be a number of seconds",
                hint=f"set it again: kvreg remote add {name} URL --replace --max-checkpoint-age 24h",
            )
        if entry.get("kind", KIND_KVREG) == KIND_OCI or entry["url"].lower().startswith(OCI_SCHEME):
            insecure = entry.get("insecure", False) is True
            return Remote(name, parse_oci_url(entry["url"]).url, 0, KIND_OCI, insecure)
        return Remote(name, normalize_url(entry["url"]), age)

    def list(self) -> list[Remote]:
        """Every configured remote, sorted by name."""
        remotes = self._remotes(jsonfile.read_object(self.path, "config"))
        return [self._parse(name, remotes[name]) for name in sorted(remotes)]

    def get(self, name: str) -> Remote:
        """The remote ``name``; ``NotFoundError`` (with the command that adds it) if unknown."""
        validate_remote_name(name)
        remotes = self._remotes(jsonfile.read_object(self.path, "config"))
        if name not in remotes:
            known = ", ".join(sorted(remotes)) or "none"
            raise NotFoundError(
                f"no remote named {name!r} (configured: {known})",
                hint=f"add it with: kvreg remote add {name} URL",
                remote=name,
            )
        return self._parse(name, remotes[name])

    def add(
        self,
        name: str,
        url: str,
        *,
        replace: bool = False,
        max_checkpoint_age: int | None = None,
        insecure: bool = False,
        force_insecure: bool = False,
    ) -> Remote:
        """Add (with ``replace``: change) a remote; ``AlreadyExistsError`` if it exists with another URL.

        ``max_checkpoint_age`` (seconds, 0: off) is stored when given; None keeps the stored
        value (a new remote: the default). An ``oci://`` URL adds an OCI remote;
        ``insecure`` (plain HTTP) is refused for a host that is not loopback unless
        ``force_insecure``."""
        validate_remote_name(name)
        if max_checkpoint_age is not None and not 0 <= max_checkpoint_age <= MAX_CHECKPOINT_AGE_LIMIT:
            raise UsageError(f"invalid maximum checkpoint age {max_checkpoint_age!r}")
        oci = url.strip().lower().startswith(OCI_SCHEME) if isinstance(url, str) else False
        if (insecure or force_insecure) and not oci:
            normalize_url(url)  # a mistyped oci:// URL is named as such first
            raise UsageError(
                "--insecure is for oci:// remotes; a kvreg registry's URL says http:// or https:// itself"
            )
        if oci:
            location = parse_oci_url(url, insecure=insecure or force_insecure)
            if location.insecure and not force_insecure and not is_loopback(location.hostname):
                raise UsageError(
                    f"refusing plain HTTP to {location.host}: credentials and artifacts would cross the "
                    "network unprotected",
                    hint="use HTTPS (drop --insecure); only a loopback registry may be plain HTTP, "
                    "unless you add --force-insecure",
                )
            if max_checkpoint_age is not None:
                raise UsageError("an OCI registry has no audit log: --max-checkpoint-age does not apply")
            return self._add_oci(name, location, replace=replace)
        remote = Remote(name, normalize_url(url))
        with jsonfile.locked(self.home, "config"):
            doc = jsonfile.read_object(self.path, "config")
            remotes = self._remotes(doc)
            current = remotes.get(name)
            if current is not None and not replace:
                existing = current.get("url") if isinstance(current, dict) else None
                if existing == remote.url and max_checkpoint_age is None:
                    return self._parse(name, current)
                if existing != remote.url:
                    raise AlreadyExistsError(
                        f"remote {name!r} exists already (url {existing})",
                        hint=f"remove it first (kvreg remote remove {name}) or pick another name",
                        remote=name,
                    )
            entry = dict(current) if isinstance(current, dict) else {}
            entry.pop("kind", None)  # a replaced OCI remote becomes a kvreg one
            entry.pop("insecure", None)
            entry["url"] = remote.url
            if max_checkpoint_age is not None:
                entry["max_checkpoint_age"] = max_checkpoint_age
            remotes[name] = entry
            doc["remotes"] = remotes
            jsonfile.write_object(self.path, doc, mode=_CONFIG_MODE, what="config")
            remote = self._parse(name, entry)
        log.info("remote %s -> %s", name, remote.url)
        return remote

    def _add_oci(self, name: str, location: OciLocation, *, replace: bool) -> Remote:
        with jsonfile.locked(self.home, "config"):
            doc = jsonfile.read_object(self.path, "config")
            remotes = self._remotes(doc)
            current = remotes.get(name)
            entry = {"url": location.url, "kind": KIND_OCI, "insecure": location.insecure}
            if current is not None and not replace:
                if current == entry:
                    return self._parse(name, current)
                existing = current.get("url") if isinstance(current, dict) else None
                raise AlreadyExistsError(
                    f"remote {name!r} exists already (url {existing})",
                    hint=f"remove it first (kvreg remote remove {name}) or pick another name",
                    remote=name,
                )
            remotes[name] = entry
            doc["remotes"] = remotes
            jsonfile.write_object(self.path, doc, mode=_CONFIG_MODE, what="config")
        log.info("remote %s -> %s (OCI)", name, location.url)
        return self._parse(name, entry)

    def remove(self, name: str) -> Remote:
        """Remove a remote (``NotFoundError`` if unknown); its stored token goes too."""
        validate_remote_name(name)
        with jsonfile.locked(self.home, "config"):
            doc = jsonfile.read_object(self.path, "config")
            remotes = self._remotes(doc)
            if name not in remotes:
                raise NotFoundError(f"no remote named {name!r}", remote=name)
            remote = self._parse(name, remotes.pop(name))
            doc["remotes"] = remotes
            jsonfile.write_object(self.path, doc, mode=_CONFIG_MODE, what="config")
        Credentials(self.home).remove(name)
        log.info("removed remote %s", name)
        return remote


class Credentials:
    """Tokens per remote in ``$KVREG_HOME/credentials.json`` (mode 0600), and ``$KVREG_TOKEN``."""

    def __init__(self, home: Home, *, environ: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.path = home.root / CREDENTIALS_NAME
        self._environ = os.environ if environ is None else environ

    def __repr__(self) -> str:
        return f"Credentials({str(self.path)!r})"

    def _check_mode(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        except OSError as e:
            raise ConfigError(f"cannot read {self.path}: {e.strerror or e}") from e
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"credentials file {self.path} is accessible by other users "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing to use it",
                hint=f"chmod 600 {self.path}",
                path=str(self.path),
            )

    def _load(self) -> dict[str, Any]:
        self._check_mode()
        return jsonfile.read_object(self.path, "credentials file")

    def stored_token(self, name: str) -> str | None:
        """The token saved for ``name`` by ``kvreg login``, or None."""
        validate_remote_name(name)
        entry = self._load().get(name)
        if entry is None or (isinstance(entry, dict) and "username" in entry and "token" not in entry):
            return None
        token = entry.get("token") if isinstance(entry, dict) else None
        if not isinstance(token, str) or not token:
            raise ConfigError(
                f"credentials file {self.path}: the entry for {name!r} has no token string",
                hint=f"log in again: kvreg login {name} --token TOKEN",
            )
        return token

    def auth_for(self, name: str) -> RemoteAuth | None:
        """The token to send to remote ``name``: ``$KVREG_TOKEN``, else the stored one, else None."""
        env = self._environ.get(TOKEN_ENV_VAR, "")
        if env.strip():
            try:
                return RemoteAuth(validate_token(env), "env")
            except UsageError as e:
                raise ConfigError(f"${TOKEN_ENV_VAR}: {e.message}", hint=e.hint) from e
        token = self.stored_token(name)
        return None if token is None else RemoteAuth(token, "credentials")

    def stored_basic(self, name: str) -> BasicCredentials | None:
        """The user name and password saved for the OCI remote ``name`` by ``kvreg login``, or None."""
        validate_remote_name(name)
        entry = self._load().get(name)
        if not isinstance(entry, dict) or "username" not in entry:
            return None
        user, password = entry.get("username"), entry.get("password")
        if not isinstance(user, str) or not isinstance(password, str) or not password:
            raise ConfigError(
                f"credentials file {self.path}: the entry for {name!r} has no username and password",
                hint=f"log in again: kvreg login {name} --username USER --password-stdin",
            )
        return BasicCredentials(user, password, "credentials")

    def set_basic(self, name: str, username: str, password: str) -> None:
        """Store a user name and password (or token) for the OCI remote ``name`` (mode 0600)."""
        validate_remote_name(name)
        if not username or any(c.isspace() or c == ":" for c in username):
            raise UsageError("the user name is empty or holds whitespace or ':'")
        value = password.strip("\r\n") if isinstance(password, str) else ""
        if not value or any(ord(c) < 0x20 for c in value):
            raise UsageError("the password is empty or holds control characters")
        with jsonfile.locked(self.home, "credentials"):
            doc = self._load()
            doc[name] = {"username": username, "password": value}
            jsonfile.write_object(self.path, doc, mode=_CREDENTIALS_MODE, what="credentials file")
        log.info("stored credentials for remote %s", name)

    def names(self) -> list[str]:
        """The remotes that have a stored token."""
        return sorted(self._load())

    def set(self, name: str, token: str) -> None:
        """Store ``token`` for ``name`` (replacing any other); the file is written with mode 0600."""
        validate_remote_name(name)
        value = validate_token(token)
        with jsonfile.locked(self.home, "credentials"):
            doc = self._load()
            doc[name] = {"token": value}
            jsonfile.write_object(self.path, doc, mode=_CREDENTIALS_MODE, what="credentials file")
        log.info("stored a token for remote %s", name)

    def remove(self, name: str) -> bool:
        """Forget the token of ``name``; True if there was one."""
        validate_remote_name(name)
        with jsonfile.locked(self.home, "credentials"):
            doc = self._load()
            if name not in doc:
                return False
            del doc[name]
            jsonfile.write_object(self.path, doc, mode=_CREDENTIALS_MODE, what="credentials file")
        log.info("removed the token of remote %s", name)
        return True
