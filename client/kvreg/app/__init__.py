"""The use-case layer: each module is one use case of kvreg.

A use case takes typed inputs (dataclasses) and returns a report dataclass; it
may combine the floors below it (``kvreg.store``, ``kvreg.remote``,
``kvreg.engine``). It renders nothing and prints nothing: the CLI parses the
arguments, calls one use case and renders its report (``kvreg.console``).

Use cases that run the engine import ``kvreg.engine`` inside their functions,
after the numerics profile's environment is in place (torch latches it when it
is imported); so importing a use case never imports torch.
"""
