"""The engine: the only package that imports torch, transformers and safetensors.

Pinned numerics, fingerprints, deposit on the absolute block grid, graft, check,
and the approximate shifted graft. Nothing outside ``kvreg.engine`` may import
torch; the CLI imports this package lazily, after the numerics profile's
environment is in place.
"""
