"""The engine: the only package that imports torch, transformers and safetensors.

Pinned numerics, fingerprints, deposit on the absolute block grid, graft, check,
the router's checks and generation, and the approximate shifted graft. Nothing
outside ``kvreg.engine`` may import torch; the use cases (``kvreg.app``) import
it lazily, after the numerics profile's environment is in place
(``kvreg.app.loader``). It never imports the remote client, the use cases or the
CLI.
"""
