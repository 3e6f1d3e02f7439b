"""``kvreg serve``: run the registry (FastAPI app under uvicorn) on this machine.

With no options it uses the embedded defaults: SQLite and a local object folder
under ``--data`` (``./kvreg-data``), listening on 127.0.0.1:8080. PostgreSQL and
S3 come from ``--database-url`` / ``--storage`` or the ``KVREG_*`` variables
(``kvreg_registry.settings``). Administration (namespaces, users, tokens, keys)
is ``kvreg-admin`` with the same ``--data``/``--database-url``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            metavar="IPS",
            help="Proxies whose X-Forwarded-For (the client's address) and X-Forwarded-Proto are "
            "believed: addresses or networks, comma-separated; '*' any peer, '' none "
            "(default: $KVREG_FORWARDED_ALLOW_IPS, else 127.0.0.1).",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Run the registry server: the HTTP API under /api/v1, OCI pulls under /v2/ and the web UI at /.

    The embedded default keeps everything in --data (SQLite and an object folder);
    --database-url and --storage point it at PostgreSQL and S3 instead.

    Examples:

      kvreg serve --data ./kvreg-data --port 8080

      kvreg serve --database-url postgresql+psycopg://kvreg:PW@db/kvreg --storage s3://kvreg/objects

      kvreg serve --host 0.0.0.0 --forwarded-allow-ips 10.0.0.0/24   # behind load balancers there

    Operators: GET /metrics (Prometheus), /livez and /readyz (health checks).
    """
    # imported here: the registry's modules (FastAPI, SQLAlchemy) load only for this command
    from kvreg.app.serve import ServeRequest, registry_settings, serve

    request = ServeRequest(
        data=data,
        database_url=database_url,
        storage=storage,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        forwarded_allow_ips=forwarded_allow_ips,
    )
    settings = registry_settings(request)
    out = output.get(ctx)
    out.note(f"kvreg registry on http://{host}:{port}/api/v1/  (data: {settings.data_dir})")
    out.note(f"web UI: open http://{host}:{port}/ in a browser")
    serve(request, settings)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
