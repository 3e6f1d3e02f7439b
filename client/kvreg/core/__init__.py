"""Pure building blocks of kvreg: no torch, no HTTP, no database.

Everything here is deterministic and side-effect free: no file I/O (that is
``kvreg.fileio``), no environment, no signals, and no clock except
``kvreg.core.timestamps``' ``utc_now`` default for "now". The only reading done here is
from a stream a caller hands in (``Digest.of_stream``, ``safetensors_header.read_header``).
The registry server imports this package, so it must never import torch (a test
enforces it).
"""
