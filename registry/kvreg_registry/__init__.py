"""The kvreg registry server (FastAPI app, database, storage backends, audit log, web UI).

It imports ``kvreg.core`` but never torch. The server itself arrives with the
registry issue; this package exists now so that the layout and the no-torch
import guarantee are in place from the start.
"""
