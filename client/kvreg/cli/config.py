"""``kvreg config get | set | unset | list``: settings in ``$KVREG_HOME/config.json``.

Known keys (``kvreg.store.settings_file.KEYS``, read and written by the use cases
of ``kvreg.app.settings``): ``store.max-bytes`` (the local store's size budget:
``20GiB``, ``500MB``, a byte count, or ``none``) and ``receipts.always`` (a
remote that gets a graft receipt after every graft). Other parts of
``config.json`` (remotes) are kept as they are.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.settings import get_setting, list_settings, set_setting, unset_setting
from kvreg.cli import common
from kvreg.console import JsonOpt

KeyArg = Annotated[str, typer.Argument(metavar="KEY", help="A setting, e.g. store.max-bytes.")]


def get_cmd(ctx: typer.Context, key: KeyArg, json_output: JsonOpt = False) -> None:
    """Print the value of KEY ('none' when it is not set)."""
    out = output.get(ctx, json_output)
    setting = get_setting(common.home(ctx), key)
    value = setting.value
    out.result(setting.to_dict(), lambda c: c.print(escape("none" if value is None else str(value))))


def set_cmd(
    ctx: typer.Context,
    key: KeyArg,
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The new value ('none' removes it).")],
    json_output: JsonOpt = False,
) -> None:
    """Set KEY to VALUE, e.g. kvreg config set store.max-bytes 20GiB."""
    out = output.get(ctx, json_output)
    setting = set_setting(common.home(ctx), key, value)
    out.result(setting.to_dict(), lambda c: c.print(f"{escape(setting.key)} = {escape(setting.display)}"))


def unset_cmd(ctx: typer.Context, key: KeyArg, json_output: JsonOpt = False) -> None:
    """Remove KEY (its default applies again)."""
    out = output.get(ctx, json_output)
    report = unset_setting(common.home(ctx), key)
    name = report.key
    out.result(
        report.to_dict(),
        lambda c: c.print(f"{escape(name)} unset" if report.removed else f"{escape(name)} was not set"),
    )


def list_cmd(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List every known key with its value and meaning."""
    out = output.get(ctx, json_output)
    listing = list_settings(common.home(ctx))

    def render(console: Console) -> None:
        table = Table(title=f"configuration {escape(str(listing.config_path))}")
        for col in ("key", "value", "meaning"):
            table.add_column(col)
        for s in listing.settings:
            table.add_row(escape(s.key), escape(s.display), escape(s.help))
        console.print(table)

    out.result(listing.to_dict(), render)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Settings of the local store ($KVREG_HOME/config.json).", no_args_is_help=True)
    group.command("get")(get_cmd)
    group.command("set")(set_cmd)
    group.command("unset")(unset_cmd)
    group.command("list")(list_cmd)
    app.add_typer(group, name="config")
