"""Credentials for an OCI registry from the files Docker and Podman keep.

Looked up in this order, the first that names the registry wins:

1. ``$REGISTRY_AUTH_FILE`` (Podman, Skopeo, Buildah);
2. ``${XDG_RUNTIME_DIR}/containers/auth.json`` (Podman's default);
3. ``~/.config/containers/auth.json``;
4. ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json`` (Docker).

In each file, as Docker reads it: ``credHelpers[host]`` names a credential helper
for that registry; else an ``auths`` entry for the host (keys may be ``host``,
``host:port``, ``https://host/v1/``...) gives ``auth`` (base64 ``user:password``),
``username``/``password`` or an ``identitytoken``; else ``credsStore`` names the
helper that holds every registry's credentials. A helper is run as Docker runs it:
``docker-credential-<name> get`` with the server on stdin, answering
``{"ServerURL", "Username", "Secret"}`` (a ``Username`` of ``<token>`` marks an
identity token). A helper that says it has no credentials for the server is not an
error: the lookup goes on. Docker Hub goes by several names (``docker.io``,
``index.docker.io``, ``registry-1.docker.io``): its credentials are found under any of
them, and a helper is asked for ``https://index.docker.io/v1/``, as Docker asks.

Secrets are never logged or shown in errors. This module reads files and runs
helpers; it does not talk to registries.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvreg.core.errors import ConfigError
from kvreg.remote.remotes import DOCKER_HUB_NAMES, DOCKER_HUB_SERVER, BasicCredentials

log = logging.getLogger(__name__)

__all__ = ["auth_files", "find_credentials", "helper_server", "registry_keys", "run_helper"]

_MAX_FILE = 4 * 1024 * 1024
_HELPER_TIMEOUT = 30.0
_IDENTITY_USER = "<token>"


def auth_files(environ: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """The credential files looked at, in order (those that may not exist included)."""
    env = os.environ if environ is None else environ
    user_home = home or Path(env.get("HOME") or Path.home())
    out: list[Path] = []
    if env.get("REGISTRY_AUTH_FILE"):
        out.append(Path(env["REGISTRY_AUTH_FILE"]))
    if env.get("XDG_RUNTIME_DIR"):
        out.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    out.append(user_home / ".config" / "containers" / "auth.json")
    docker = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else user_home / ".docker"
    out.append(docker / "config.json")
    return out


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot read %s: %s", path, e.strerror or e)
        return None
    try:
        doc = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"credential file {path} is not valid JSON", hint=f"fix or remove {path}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"credential file {path} must hold a JSON object", hint=f"fix or remove {path}")
    return doc


def _host_of_key(key: str) -> str:
    text = key.strip()
    for scheme in ("https://", "http://"):
        if text.lower().startswith(scheme):
            text = text[len(scheme) :]
    return text.split("/", 1)[0].lower()


def _entry_for(auths: Any, host: str) -> dict[str, Any] | None:
    if not isinstance(auths, dict):
        return None
    for key, value in auths.items():
        if isinstance(key, str) and _host_of_key(key) == host and isinstance(value, dict):
            return value
    return None


def _from_entry(entry: dict[str, Any], source: str) -> BasicCredentials | None:
    token = entry.get("identitytoken")
    if isinstance(token, str) and token:
        return BasicCredentials(None, token, source)
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            user, sep, password = base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"{source}: an 'auth' entry is not base64 of user:password") from e
        if sep and user:
            return BasicCredentials(user, password, source)
    name, secret = entry.get("username"), entry.get("password")
    if isinstance(name, str) and name and isinstance(secret, str):
        return BasicCredentials(name, secret, source)
    return None


def run_helper(
    name: str, server: str, *, environ: Mapping[str, str] | None = None
) -> BasicCredentials | None:
    """Ask ``docker-credential-<name>`` for the credentials of ``server``; None if it has none."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"invalid credential helper name {name!r}")
    program = f"docker-credential-{name}"
    env = dict(os.environ if environ is None else environ)
    path = shutil.which(program, path=env.get("PATH"))
    if path is None:
        raise ConfigError(
            f"the credential helper {program} named in the Docker config is not on PATH",
            hint=f"install {program}, or remove it from the Docker config",
        )
    try:
        done = subprocess.run(
            [path, "get"],
            input=server.encode(),
            capture_output=True,
            timeout=_HELPER_TIMEOUT,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"the credential helper {program} failed to run: {type(e).__name__}") from e
    if done.returncode != 0:
        said = done.stdout.decode("utf-8", "replace").strip().lower()
        if "credentials not found" in said:
            return None
        raise ConfigError(f"the credential helper {program} failed (exit {done.returncode})")
    try:
        doc = json.loads(done.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"the credential helper {program} did not answer JSON") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"the credential helper {program} did not answer a JSON object")
    user, secret = doc.get("Username"), doc.get("Secret")
    if not isinstance(secret, str) or not secret:
        return None
    source = f"credential helper {program}"
    if user == _IDENTITY_USER or not isinstance(user, str) or not user:
        return BasicCredentials(None, secret, source)
    return BasicCredentials(user, secret, source)


def registry_keys(host: str) -> tuple[str, ...]:
    """The names under which the credentials of registry ``host`` may be kept: Docker Hub's
    several names are one registry (``docker login`` writes ``https://index.docker.io/v1/``,
    Podman ``docker.io``)."""
    return DOCKER_HUB_NAMES if host in DOCKER_HUB_NAMES else (host,)


def helper_server(host: str) -> str:
    """The server name a credential helper is asked about for ``host`` (Docker's for Docker Hub)."""
    return DOCKER_HUB_SERVER if host in DOCKER_HUB_NAMES else host


def find_credentials(
    host: str, *, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> BasicCredentials | None:
    """The credentials Docker or Podman would use for registry ``host`` (``host[:port]``), or None."""
    host = host.lower()
    keys = registry_keys(host)
    server = helper_server(host)
    for path in auth_files(environ, home):
        doc = _read(path)
        if doc is None:
            continue
        helpers = doc.get("credHelpers")
        if isinstance(helpers, dict):
            named = [helpers[k] for k in keys if isinstance(helpers.get(k), str)]
            for helper in named[:1]:
                found = run_helper(helper, server, environ=environ)
                if found is not None:
                    return found
        for key in keys:
            entry = _entry_for(doc.get("auths"), key)
            if entry is not None:
                found = _from_entry(entry, str(path))
                if found is not None:
                    return found
        store = doc.get("credsStore")
        if isinstance(store, str) and store:
            found = run_helper(store, server, environ=environ)
            if found is not None:
                return found
    return None
