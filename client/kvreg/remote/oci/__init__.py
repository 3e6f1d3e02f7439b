"""The client of OCI registries (Docker's, Harbor, GHCR, ECR, GAR, ACR, Artifactory, CNCF
distribution): kvreg artifacts pushed and pulled as OCI artifacts (``kvreg.core.oci``).

One module per job: ``errors`` (OCI error answers to kvreg's typed errors), ``auth``
(``WWW-Authenticate`` challenges, Basic credentials, the Docker token flow),
``dockerconfig`` (credentials from Docker's and Podman's files and credential
helpers), ``client`` (``OciClient``: requests with authentication, blobs, manifests,
referrers, tags), ``pushing`` and ``pulling`` (the transfers, with kvreg's
guarantees), ``listing`` (``kvreg ls-remote``). The local record of the tags seen,
which refuses a tag moved back, is ``kvreg.store.tag_history``.

Nothing here prints; ``kvreg.app`` picks this package for a remote whose kind is
``oci`` (``kvreg.remote.remotes``).
"""
