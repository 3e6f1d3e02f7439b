"""``kvreg-admin``: administer a registry's database directly (no server needed).

This is how the first admin token is made, and how operators script namespaces,
users, tokens, roles, signing keys and garbage collection. It reads the same
settings as ``kvreg serve`` (``--data``, ``--database-url``, ``--storage`` or the
``KVREG_*`` variables), runs the migrations if needed, and calls the same
``kvreg_registry.services`` functions as the HTTP API, so every change is checked
and audit-logged the same way (actor :data:`ACTOR`, ``kvreg-admin``). Tokens are printed once.

This module only assembles the Typer ``app`` from one module per command group
(``namespaces``, ``users``, ``tokens``, ``roles``, ``keys``, ``holds``, ``retention``,
``search``) and the top-level commands of ``maintenance``; ``main`` is the script's
entry point. Output goes through ``kvreg.console``, so ``--json``, messages and exit
codes behave exactly as in ``kvreg``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from kvreg import console as output
from kvreg_registry.admin import holds, keys, maintenance, namespaces, retention, roles, search, tokens, users
from kvreg_registry.admin.common import ACTOR, global_options

__all__ = ["ACTOR", "app", "main"]

app = typer.Typer(
    name="kvreg-admin",
    help="Administer a kvreg registry's database: namespaces, users, tokens, roles, keys, legal holds, "
    "retention, GC, the search index.\n\n"
    "Example (first setup):\n\n"
    "  kvreg-admin --data ./kvreg-data user create alice --admin\n\n"
    "  kvreg-admin --data ./kvreg-data token create alice --label laptop\n\n"
    "  kvreg-admin --data ./kvreg-data namespace create aime25\n\n"
    "  kvreg-admin --data ./kvreg-data key add aime25 ed25519:...",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.callback()(global_options)
app.add_typer(namespaces.app, name="namespace")
app.add_typer(users.app, name="user")
app.add_typer(tokens.app, name="token")
app.add_typer(roles.app, name="role")
app.add_typer(keys.app, name="key")
app.add_typer(holds.app, name="hold")
app.add_typer(retention.app, name="retention")
app.add_typer(search.app, name="search")
app.command()(maintenance.migrate)
app.command()(maintenance.gc)
app.command()(maintenance.fsck)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``kvreg-admin`` script."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = output.run(typer.main.get_command(app), args, prog_name="kvreg-admin")
    output.exit_with(code)
