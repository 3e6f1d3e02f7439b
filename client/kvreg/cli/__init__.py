"""The ``kvreg`` command: thin Typer commands over the library, one module per group."""
