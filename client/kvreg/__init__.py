"""kvreg: a content-addressed, git-like registry for LLM KV-cache states.

The package is layered so that each layer imports only those below it:

- ``kvreg.core``: pure data and cryptography (digests, canonical JSON, Merkle trees,
  manifests, DSSE envelopes, keys, block keys, errors). No torch, no HTTP, no DB.
- ``kvreg.store``: the local content-addressed object store, refs, fsck and gc.
- ``kvreg.engine``: the only place that imports torch, transformers and safetensors.
- ``kvreg.cli``: the ``kvreg`` command, a thin layer over the above.
"""

__version__ = "0.1.0"
