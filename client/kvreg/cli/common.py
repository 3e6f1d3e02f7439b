"""Small helpers the command modules share: the store of this invocation, input files, prompts.

Everything here raises ``KvregError`` subclasses with a hint; nothing prints
(``kvreg.console`` does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvreg.app.home import StoreHome, open_home
from kvreg.app.prompts import Prompt, chat_turn, load_messages_file
from kvreg.app.textfiles import read_utf8_text
from kvreg.console import CliState
from kvreg.core.errors import UsageError

_MAX_TEXT_BYTES = 256 * 1024 * 1024

#: How ``--messages-file`` and ``--chat`` prompts are rendered (for the options' help).
CHAT_RULE = (
    "rendered with the model's own chat template, with the assistant's generation prompt "
    "unless the last message is the assistant's"
)
MessagesFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--messages-file",
        metavar="FILE",
        help=f"The prompt as chat messages (a JSON list of {{role, content}}), {CHAT_RULE}.",
    ),
]
ChatOpt = Annotated[
    bool,
    typer.Option(
        "--chat",
        help="Send --prompt-file as one user turn, rendered with the model's own chat template "
        "(as a chat client would).",
    ),
]

RouteRemoteOpt = Annotated[
    str | None,
    typer.Option(
        "--remote",
        metavar="NAME",
        help="Also route over this registry (kvreg remote add): candidates are pulled lazily "
        "and only the chunks a graft reads are fetched, each verified.",
    ),
]
RouteNamespaceOpt = Annotated[
    list[str] | None,
    typer.Option("--namespace", "-n", metavar="NS", help="With --remote: route within NS only (repeatable)."),
]

RefArg = Annotated[str, typer.Argument(metavar="REF", help="NS/NAME or a manifest digest sha256:<hex>.")]


def home(ctx: typer.Context) -> StoreHome:
    """The store of this invocation: ``--home``, else ``$KVREG_HOME``, else ``~/.kvreg``."""
    state = ctx.find_object(CliState)
    return open_home(state.home if state is not None else None)


def read_text_file(path: str | Path, *, what: str) -> str:
    """A text file's exact content, decoded strictly as UTF-8."""
    source = Path(path)
    return read_utf8_text(source, f"{what} {source}", _MAX_TEXT_BYTES)


def parse_json_object(text: str, *, option: str) -> dict[str, Any]:
    """A JSON object given on the command line, or ``@FILE`` for one in a file."""
    source = option
    if text.startswith("@"):
        source = f"{option} file {text[1:]}"
        text = read_text_file(text[1:], what=f"{option} file")
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(
            f"{source} is not valid JSON: {e}", hint='e.g. --evidence \'{"answer": "738"}\''
        ) from e
    if not isinstance(value, dict):
        raise UsageError(f"{source} must be a JSON object, not {type(value).__name__}")
    return value


MODEL_HELP = "A model folder, or the name of an imported model (kvreg model ls)."


def read_prompt(prompt_file: Path | None, messages_file: Path | None, chat: bool) -> Prompt | None:
    """The prompt the options give: ``--prompt-file`` text, that text as one user turn
    (``--chat``), ``--messages-file`` messages, or None; ``UsageError`` for a bad mix."""
    if messages_file is not None and prompt_file is not None:
        raise UsageError("give --prompt-file or --messages-file, not both")
    if chat and prompt_file is None:
        if messages_file is not None:
            raise UsageError("--messages-file is already chat messages: drop --chat")
        raise UsageError("--chat sends --prompt-file as one user turn: give --prompt-file FILE")
    if messages_file is not None:
        return load_messages_file(messages_file)
    if prompt_file is None:
        return None
    text = read_text_file(prompt_file, what="prompt file")
    return chat_turn(text) if chat else text
