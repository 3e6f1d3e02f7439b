"""The reference pages of the documentation site, generated from the code at build time.

mkdocs-gen-files runs this file during ``mkdocs build`` (``plugins: gen-files`` in mkdocs.yml) and
the pages exist only in the built site, never in the repository, so they cannot drift:

- ``reference/cli/*.md``: every ``kvreg`` and ``kvreg-admin`` command with its arguments and
  options, one page per command group, rendered by Typer's own Markdown generator (the one behind
  ``typer ... utils docs``) from the click commands the two Typer apps build;
- ``reference/http-api.md``: every route of the registry's HTTP API from the OpenAPI document the
  registry app publishes (``/api/v1/openapi.json``);
- ``reference/errors.md``: every stable error code of the one error hierarchy
  (``kvreg.core.errors``), with its exit status and the HTTP status the registry answers with.

The OpenAPI page is rendered here (a hundred lines) rather than by a plugin: the maintained ones
either embed Swagger UI (JavaScript fetching the document at view time, nothing in the page for
search or for the strict build to check) or read the document from a file path or URL at build
time and bring their own stylesheets. tests/docs/test_reference.py checks the pages name every
command, route and code.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import typer
import typer.main
from typer.cli import get_docs_for_click
from typer.core import TyperGroup

from kvreg.cli.main import build_app
from kvreg.core import errors
from kvreg_registry.admin import app as admin_app
from kvreg_registry.api.errors import status_of
from kvreg_registry.app import create_app
from kvreg_registry.settings import Settings

CLI_DIR = "reference/cli"
# At the end of a page: a page's title is its first heading only when nothing comes before it.
GENERATED_NOTE = "\n<!-- generated at build time by scripts/docs_reference.py; do not edit -->\n"


# --- the command line ----------------------------------------------------------------------------


def cli_programs() -> dict[str, TyperGroup]:
    """The two programs as (click) command groups: ``kvreg`` and ``kvreg-admin``."""
    programs = {}
    for name, app in (("kvreg", build_app()), ("kvreg-admin", admin_app)):
        command = typer.main.get_command(app)
        assert isinstance(command, TyperGroup), name
        _for_the_page(command)
        programs[name] = command
    return programs


def _for_the_page(group: TyperGroup) -> None:
    """Help written for a terminal, made for a page (these click objects are built for it only):
    a group's list of commands shows each one's first sentence whole (click cuts it at 45
    characters), and indented example lines become code blocks."""
    group.help = _indented_to_code(group.help)
    for sub in group.commands.values():
        if sub.short_help is None:
            sub.short_help = sub.get_short_help_str(limit=300)
        if isinstance(sub, TyperGroup):
            _for_the_page(sub)
        else:
            sub.help = _indented_to_code(sub.help)


def _indented_to_code(text: str | None) -> str | None:
    """Paragraphs whose every line is indented (the examples of a --help) as ``console`` blocks."""
    if not text:
        return text
    out: list[str | list[str]] = []  # prose paragraphs, and the lines of code blocks
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.split("\n")
        if not all(line.startswith("  ") for line in lines):
            out.append(paragraph)
        elif out and isinstance(out[-1], list):
            out[-1].extend(line.strip() for line in lines)  # one block for consecutive examples
        else:
            out.append([line.strip() for line in lines])
    return "\n\n".join(p if isinstance(p, str) else "```console\n" + "\n".join(p) + "\n```" for p in out)


def page_name(program: str, group: str | None = None) -> str:
    return f"{program}-{group}.md" if group else f"{program}.md"


def _leaf_group(root: TyperGroup, ctx: typer.Context) -> TyperGroup:
    """``root`` with its own options and only the commands that are not groups."""
    leaves = {n: c for n in root.list_commands(ctx) if not isinstance(c := root.commands[n], TyperGroup)}
    return TyperGroup(name=root.name, commands=leaves, params=root.params, help=root.help)


def cli_pages() -> dict[str, str]:
    """Page file name (under reference/cli/) -> Markdown: one page per program for its commands,
    one per command group."""
    pages: dict[str, str] = {}
    for program, root in cli_programs().items():
        ctx = typer.Context(root, info_name=program)
        groups = [n for n in root.list_commands(ctx) if isinstance(root.commands[n], TyperGroup)]
        links = "".join(
            f"- [`{program} {g}`]({page_name(program, g)}): {root.commands[g].get_short_help_str(100)}\n"
            for g in groups
        )
        body = get_docs_for_click(obj=_leaf_group(root, ctx), ctx=ctx, name=program)
        if links:
            body += f"## Command groups\n\n{links}"
        pages[page_name(program)] = body + GENERATED_NOTE
        for group in groups:
            command = root.commands[group]
            body = get_docs_for_click(obj=command, ctx=ctx, name=group, call_prefix=program)
            pages[page_name(program, group)] = body + GENERATED_NOTE
    return pages


def every_command() -> Iterator[str]:
    """Every command's full name (``kvreg keys generate``), groups included."""

    def walk(prefix: str, command: object) -> Iterator[str]:
        yield prefix
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                if not getattr(sub, "hidden", False):
                    yield from walk(f"{prefix} {name}", sub)

    for program, root in cli_programs().items():
        yield from walk(program, root)


# --- the HTTP API --------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The registry app's OpenAPI document (the app is built, never started)."""
    return create_app(Settings()).openapi()


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(kind)


def _section(path: str, operation: dict[str, Any], prefix: str) -> str:
    """The heading an operation goes under: its tag, else the resource its path names."""
    if operation.get("tags"):
        return str(operation["tags"][0]).capitalize()
    rest = path.removeprefix(prefix).removeprefix("/namespaces/{ns}")
    segment = rest.strip("/").split("/")[0]
    if not segment:
        segment = "namespaces" if rest != path.removeprefix(prefix) else "server"
    return {"whoami": "Server", "gc": "GC"}.get(segment, segment.capitalize())


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    out = f"### `{method.upper()} {path}`\n\n"
    if op.get("summary"):
        out += f"{op['summary']}.\n\n" if not op["summary"].endswith(".") else f"{op['summary']}\n\n"
    if op.get("description"):
        out += f"{op['description'].strip()}\n\n"
    params = op.get("parameters", [])
    if params:
        out += "| parameter | in | type | required | description |\n|---|---|---|---|---|\n"
        for p in params:
            required = "yes" if p.get("required") else ""
            schema_type = _schema_type(p.get("schema", {}))
            description = _cell(p.get("description", ""))
            out += f"| `{p['name']}` | {p['in']} | {schema_type} | {required} | {description} |\n"
        out += "\n"
    body = op.get("requestBody")
    if body:
        kinds = ", ".join(
            f"`{media}` ({_schema_type(c.get('schema', {}))})" if c.get("schema") else f"`{media}`"
            for media, c in body.get("content", {}).items()
        )
        out += f"Request body{' (required)' if body.get('required') else ''}: {kinds}\n\n"
    out += "| status | meaning | body |\n|---|---|---|\n"
    for status, response in op.get("responses", {}).items():
        content = response.get("content", {})
        shown = ", ".join(
            f"`{media}` {_schema_type(c['schema'])}" if c.get("schema") else f"`{media}`"
            for media, c in content.items()
        )
        out += f"| {status} | {_cell(response.get('description', ''))} | {shown} |\n"
    return out + "\n"


def _schemas(components: dict[str, Any]) -> str:
    out = "## Schemas\n\n"
    for name, schema in sorted(components.get("schemas", {}).items()):
        out += f"### {name}\n\n"
        if schema.get("description"):
            out += f"{schema['description'].strip()}\n\n"
        props = schema.get("properties", {})
        if not props:
            out += f"Type: {_schema_type(schema)}\n\n"
            continue
        required = set(schema.get("required", []))
        out += "| field | type | required | description |\n|---|---|---|---|\n"
        for field, spec in props.items():
            description = _cell(spec.get("description", ""))
            mark = "yes" if field in required else ""
            out += f"| `{field}` | {_schema_type(spec)} | {mark} | {description} |\n"
        out += "\n"
    return out


def http_api_page() -> str:
    doc = openapi_document()
    prefix = "/api/v1"
    sections: dict[str, list[str]] = {}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            sections.setdefault(_section(path, op, prefix), []).append(_operation(method, path, op))
    out = "# HTTP API\n\n"
    out += (
        f"The registry's HTTP API, version {doc['info']['version']}, from the OpenAPI document that "
        f"every registry publishes at `{prefix}/openapi.json` (and browses at `{prefix}/docs`). "
        'Errors are JSON bodies `{"error": {"code", "message", "hint"?, "details"?}}` with the '
        "code repeated in the `X-Kvreg-Error-Code` header; the codes are in "
        "[Error codes](errors.md). How a client uses these routes together (push, pull, refs "
        "moved by compare-and-swap) is in [the protocol](../protocol.md). The OCI pull API under "
        "`/v2/` is described there too; the operators' endpoints `/metrics`, `/livez` and "
        "`/readyz` are in [deployment](../deployment.md).\n\n"
    )
    for section, operations in sections.items():
        out += f"## {section}\n\n" + "".join(operations)
    return out + _schemas(doc.get("components", {})) + GENERATED_NOTE


def every_route() -> Iterator[str]:
    """``METHOD /path`` of every operation in the OpenAPI document."""
    for path, operations in openapi_document()["paths"].items():
        for method in operations:
            yield f"{method.upper()} {path}"


# --- the error codes -----------------------------------------------------------------------------


def error_hierarchy() -> list[tuple[int, type[errors.KvregError]]]:
    """Every error class (depth, class), parents before their children, siblings in source order."""
    out: list[tuple[int, type[errors.KvregError]]] = []

    def walk(cls: type[errors.KvregError], depth: int) -> None:
        out.append((depth, cls))
        for sub in sorted(cls.__subclasses__(), key=lambda c: inspect.getsourcelines(c)[1]):
            walk(sub, depth + 1)

    walk(errors.KvregError, 0)
    return out


_EXIT_MEANING = {
    errors.EXIT_ERROR: "1 error",
    errors.EXIT_USAGE: "2 usage",
    errors.EXIT_INTEGRITY: "3 integrity",
}


def errors_page() -> str:
    out = "# Error codes\n\n"
    out += (
        "Every failure kvreg reports on purpose has a stable code: the same string in the CLI's "
        '`--json` output (`{"code", "message", "hint"?, "details"?}`), in the registry\'s '
        "HTTP error bodies and in their `X-Kvreg-Error-Code` header. Codes are never renamed, "
        "only added. The exit status is the `kvreg` command's (0 is success); the HTTP status is "
        "what the registry answers with (— for the client's own errors, which no registry sends). "
        "A class inherits its parent's statuses unless it sets its own; indentation shows the "
        "hierarchy. Under `/v2/` (OCI pulls) errors take the OCI "
        "distribution format instead.\n\n"
    )
    out += "| code | exit | HTTP | meaning |\n|---|---|---|---|\n"
    for depth, cls in error_hierarchy():
        doc = inspect.getdoc(cls) or ""
        if cls is not errors.KvregError and doc == inspect.getdoc(cls.__mro__[1]):
            doc = ""  # inherited, not its own
        meaning = _cell(re.split(r"\n\s*\n", doc)[0]) if doc else ""
        indent = "&nbsp;&nbsp;" * depth
        exit_status = _EXIT_MEANING.get(cls.exit_code, str(cls.exit_code))
        status = status_of(cls("example"))
        # 500 is what the registry answers for what it does not map: only INTERNAL is one it sends
        http = "—" if status == 500 and cls is not errors.InternalServerError else str(status)
        out += f"| {indent}`{cls.code}` | {exit_status} | {http} | {meaning} (`{cls.__name__}`) |\n"
    return out + GENERATED_NOTE


def every_error_code() -> Iterator[str]:
    yield from errors.error_classes()


# --- the build -----------------------------------------------------------------------------------


def write_pages() -> None:
    """Called by mkdocs-gen-files: the pages go into the build, never into docs/."""
    import mkdocs_gen_files

    for name, text in cli_pages().items():
        with mkdocs_gen_files.open(f"{CLI_DIR}/{name}", "w") as f:
            f.write(text)
    with mkdocs_gen_files.open("reference/http-api.md", "w") as f:
        f.write(http_api_page())
    with mkdocs_gen_files.open("reference/errors.md", "w") as f:
        f.write(errors_page())


if __name__ in {"__main__", "<run_path>"}:  # mkdocs-gen-files runs it with runpy.run_path
    write_pages()
