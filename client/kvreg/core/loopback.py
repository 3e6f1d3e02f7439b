"""Whether a host name or address is this machine's loopback, from its spelling alone.

Plain HTTP is allowed only to loopback (a kvreg registry's ``http://`` URL, an OCI
remote's ``--insecure``, a token service's realm). ``localhost`` and names under
``.localhost`` count (RFC 6761 reserves them for loopback), as do ``127.0.0.0/8`` and
``::1`` in any notation Python's ``ipaddress`` reads, bracketed or not. This module
resolves nothing: a name that merely resolves to 127.0.0.1 is not loopback here.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``*.localhost`` and loopback addresses (``[::1]`` included)."""
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
