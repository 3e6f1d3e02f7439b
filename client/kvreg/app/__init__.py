"""The use-case layer: each module is one use case taking typed inputs and returning a report dataclass.

A use case may combine the store, a remote and the engine; it renders nothing and
prints nothing (the CLI in ``kvreg.cli`` parses, calls a use case and renders its
report).
"""
