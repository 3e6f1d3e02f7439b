"""The client of OCI registries (Docker's, Harbor, GHCR, ECR, GAR, ACR, Artifactory, CNCF
distribution): kvreg artifacts pushed and pulled as OCI artifacts (``kvreg.core.oci``).

One module per job: ``errors`` (OCI error answers to kvreg's typed errors),
``challenges`` (``WWW-Authenticate`` challenges and scopes), ``tokens`` (one request to
a token service, bounded), ``auth`` (what to send as ``Authorization``: Basic
credentials, tokens kept per scope and replaced before they expire), ``dockerconfig``
(credentials from Docker's and Podman's files and credential helpers), ``transport``,
``blobs``, ``manifests`` and ``client`` (``OciClient``: requests with authentication,
redirects followed, blobs, manifests, referrers, tags), ``pushing`` and ``pulling``
(the transfers, with kvreg's guarantees), ``listing`` (``kvreg ls-remote``). The local
record of the tags seen, which refuses a tag moved back, is ``kvreg.store.tag_history``.

Nothing here prints; ``kvreg.app`` picks this package for a remote whose kind is
``oci`` (``kvreg.remote.remotes``).
"""
