"""``kvreg config get | set | unset | list``: settings in ``$KVREG_HOME/config.json``.

Known keys (``kvreg.store.settings_file.KEYS``): ``store.max-bytes`` (the local store's
size budget: ``20GiB``, ``500MB``, a byte count, or ``none``) and
``receipts.always`` (a remote that gets a graft receipt after every graft). Other
parts of ``config.json`` (remotes) are kept as they are.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.cli import common
from kvreg.console import JsonOpt
from kvreg.store import settings_file

KeyArg = Annotated[str, typer.Argument(metavar="KEY", help="A setting, e.g. store.max-bytes.")]


def _entry(name: str, value: Any) -> dict[str, Any]:
    return {"key": name, "value": value, "display": settings_file.KEYS[name].show(value)}


def get_cmd(ctx: typer.Context, key: KeyArg, json_output: JsonOpt = False) -> None:
    """Print the value of KEY ('none' when it is not set)."""
    out = output.get(ctx, json_output)
    name = settings_file.key(key).name
    value = settings_file.get(common.home(ctx), name)
    data = _entry(name, value)
    out.result(data, lambda c: c.print(escape("none" if value is None else str(value))))


def set_cmd(
    ctx: typer.Context,
    key: KeyArg,
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The new value ('none' removes it).")],
    json_output: JsonOpt = False,
) -> None:
    """Set KEY to VALUE, e.g. kvreg config set store.max-bytes 20GiB."""
    out = output.get(ctx, json_output)
    name = settings_file.key(key).name
    stored = settings_file.set_text(common.home(ctx), name, value)
    data = _entry(name, stored)
    out.result(data, lambda c: c.print(f"{escape(name)} = {escape(data['display'])}"))


def unset_cmd(ctx: typer.Context, key: KeyArg, json_output: JsonOpt = False) -> None:
    """Remove KEY (its default applies again)."""
    out = output.get(ctx, json_output)
    name = settings_file.key(key).name
    was = settings_file.unset(common.home(ctx), name)
    out.result(
        {"key": name, "removed": was},
        lambda c: c.print(f"{escape(name)} unset" if was else f"{escape(name)} was not set"),
    )


def list_cmd(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List every known key with its value and meaning."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    rows = [
        {**_entry(n, settings_file.get(home, n)), "help": settings_file.KEYS[n].help}
        for n in sorted(settings_file.KEYS)
    ]

    def render(console: Console) -> None:
        table = Table(title=f"configuration {escape(str(home.config_path))}")
        for col in ("key", "value", "meaning"):
            table.add_column(col)
        for r in rows:
            table.add_row(escape(r["key"]), escape(r["display"]), escape(r["help"]))
        console.print(table)

    out.result({"config": rows}, render)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Settings of the local store ($KVREG_HOME/config.json).", no_args_is_help=True)
    group.command("get")(get_cmd)
    group.command("set")(set_cmd)
    group.command("unset")(unset_cmd)
    group.command("list")(list_cmd)
    app.add_typer(group, name="config")
