"""Pure building blocks of kvreg: no torch, no HTTP, no database.

Everything here is deterministic and side-effect free except key-file I/O in
``kvreg.core.keys``. The registry server imports this package, so it must never
import torch (a test enforces it).
"""
