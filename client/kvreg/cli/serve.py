"""``kvreg serve``: run the registry (FastAPI app under uvicorn) on this machine.

With no options it uses the embedded defaults: SQLite and a local object folder
under ``--data`` (``./kvreg-data``), listening on 127.0.0.1:8080. PostgreSQL and
S3 come from ``--database-url`` / ``--storage`` or the ``KVREG_*`` variables
(``kvreg_registry.settings``). Administration (namespaces, users, tokens, keys)
is ``kvreg-admin`` with the same ``--data``/``--database-url``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvreg import console as output


def serve(
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            metavar="DIR",
            help="Data folder: SQLite file and objects (default: $KVREG_DATA or ./kvreg-data).",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; keep it on loopback unless behind a proxy.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0 picks a free one).")] = 8080,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url", help="postgresql+psycopg://USER:PASS@HOST:PORT/DB (default: SQLite in --data)."
        ),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage", help="Object storage: a folder, or s3://BUCKET/PREFIX (default: DATA/objects)."
        ),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="uvicorn worker processes.")] = 1,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Run the registry server: the HTTP API under /api/v1 and the web UI at /.

    Examples:

      kvreg serve                                   # SQLite + ./kvreg-data/objects on 127.0.0.1:8080

      KVREG_S3_ENDPOINT=http://127.0.0.1:8333 kvreg serve --storage s3://kvreg/objects \
        --database-url postgresql+psycopg://kvreg:PASSWORD@127.0.0.1/kvreg
    """
    import os

    from kvreg_registry.settings import Settings

    overrides: dict[str, Any] = {}
    if data is not None:
        overrides["data_dir"] = data
    if database_url is not None:
        overrides["database_url"] = database_url
    if storage is not None:
        overrides["storage_url"] = storage
    settings = Settings.from_env(**overrides)
    out = output.get(ctx)
    out.note(f"kvreg registry on http://{host}:{port}/api/v1/  (data: {settings.data_dir})")
    out.note(f"web UI: open http://{host}:{port}/ in a browser")
    if workers > 1:
        # Worker processes build the app from the environment.
        os.environ["KVREG_DATA"] = str(settings.data_dir)
        if settings.database_url:
            os.environ["KVREG_DATABASE_URL"] = settings.database_url
        if settings.storage_url:
            os.environ["KVREG_STORAGE"] = settings.storage_url
    from kvreg_registry.server import run

    run(settings, host=host, port=port, workers=workers, log_level=log_level)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
