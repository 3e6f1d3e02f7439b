"""The documentation's examples, run as a reader would run them (rules: tests/docs/README.md).

Every fenced ``bash`` or ``python`` block of docs/getting-started/*.md and docs/how-to/*.md runs,
page by page, top to bottom, against the installed ``kvreg`` (the virtual environment's ``bin``
first on ``PATH``), the host's model library and the real services a page starts itself.

The harness is our own, small, on top of markdown-it-py (the Markdown parser rich already brings)
because none of the maintained ones fits the convention: mktestdocs runs each block alone (no
working directory or exported variables shared along a page), pytest-examples runs Python only,
and Sybil collects documents where pytest walks (docs/ is outside ``testpaths``) and would need
custom shell evaluators, process-group cleanup and per-page state all the same.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from kvreg.store.model_library import resolve_library_root

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE_GLOBS = ("getting-started/*.md", "how-to/*.md")
RUNNABLE = ("bash", "python")
BLOCK_TIMEOUT_S = 300
OUTPUT_TAIL_LINES = 60


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # 1-based line of the opening fence
    code: str


def runnable_blocks(text: str) -> list[Block]:
    """The page's ``bash`` and ``python`` fenced blocks (info string exactly that), in order."""
    blocks = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "fence" and token.info.strip() in RUNNABLE and token.map is not None:
            blocks.append(Block(token.info.strip(), token.map[0] + 1, token.content))
    return blocks


def pages() -> list[Path]:
    found = sorted({p for pattern in PAGE_GLOBS for p in DOCS.glob(pattern)})
    return [p for p in found if runnable_blocks(p.read_text(encoding="utf-8"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def page_environment(workdir: Path) -> dict[str, str]:
    """The environment every block of a page starts from (tests/docs/README.md)."""
    env = dict(os.environ)
    for name in ("KVREG_HOME", "KVREG_DATA"):
        env.pop(name, None)
    env["KVREG_MODELS"] = str(resolve_library_root())  # the host's, before HOME moves
    home = workdir / "home"
    home.mkdir()
    env["HOME"] = str(home)
    env.pop("XDG_CACHE_HOME", None)
    env.pop("XDG_CONFIG_HOME", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["PORT"] = str(_free_port())
    return env


class PageRun:
    """One page's blocks in one directory; exported variables carry from block to block."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page = page
        self.workdir = workdir
        self.env = page_environment(workdir)
        self.state = workdir.parent / f"{workdir.name}.exports.sh"
        self.state.write_text("", encoding="utf-8")
        self.groups: list[int] = []

    def run(self, index: int, block: Block) -> None:
        scripts = self.workdir.parent
        body = block.code
        if block.language == "python":
            source = scripts / f"{self.workdir.name}.block{index}.py"
            source.write_text(block.code, encoding="utf-8")
            body = f'python "{source}"\n'
        script = scripts / f"{self.workdir.name}.block{index}.sh"
        script.write_text(
            f'source "{self.state}"\ncd "{self.workdir}"\nset -eo pipefail\n'
            f"{body}\n"
            f'set +e\nexport -p > "{self.state}.next" && mv "{self.state}.next" "{self.state}"\n',
            encoding="utf-8",
        )
        log = scripts / f"{self.workdir.name}.block{index}.log"
        with log.open("wb") as out:
            # A file, not a pipe, takes the output: a server a block starts in the background
            # keeps it open, and the block must still end when its script does.
            proc = subprocess.Popen(
                ["bash", str(script)],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.groups.append(proc.pid)
            try:
                status: int | str = proc.wait(timeout=BLOCK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                status = f"did not finish in {BLOCK_TIMEOUT_S} s"
        if status != 0:
            self.fail(block, status, log.read_text(encoding="utf-8", errors="replace"))

    def fail(self, block: Block, status: int | str, output: str) -> None:
        tail = "\n".join(output.splitlines()[-OUTPUT_TAIL_LINES:])
        page = self.page.relative_to(DOCS.parent) if self.page.is_relative_to(DOCS.parent) else self.page
        where = f"{page}:{block.line}"
        what = f"exited with status {status}" if isinstance(status, int) else status
        pytest.fail(
            f"{where}: {block.language} block {what}\n"
            f"--- the block ---\n{block.code}"
            f"--- its output (last {OUTPUT_TAIL_LINES} lines) ---\n{tail}",
            pytrace=False,
        )

    def stop(self) -> None:
        """End whatever the page's blocks left running (each block is its own process group)."""
        for group in self.groups:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(group, sig)
                except ProcessLookupError:
                    break
                if sig == signal.SIGTERM:
                    _wait_group_gone(group)


def _wait_group_gone(group: int, attempts: int = 50) -> None:
    for _ in range(attempts):
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


@pytest.mark.slow  # the pages run the real model (SmolLM2) through the installed kvreg
@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page(page: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "page"
    workdir.mkdir()
    run = PageRun(page, workdir)
    try:
        for index, block in enumerate(runnable_blocks(page.read_text(encoding="utf-8"))):
            run.run(index, block)
    finally:
        run.stop()


# --- the harness itself, on pages written here ------------------------------------------------

SAMPLE = """# A page

```console
$ kvreg --version
```

```bash
export GREETING=hello
echo "$GREETING" > greeting.txt
```

```python
import os
from pathlib import Path

assert Path("greeting.txt").read_text() == "hello\\n"
assert os.environ["GREETING"] == "hello"
```

```sh
sudo apt-get install something
```

```bash
echo "about to fail"
false
echo "never printed"
```
"""


def test_only_bash_and_python_blocks_run_with_their_fence_lines() -> None:
    blocks = runnable_blocks(SAMPLE)
    assert [(b.language, b.line) for b in blocks] == [("bash", 7), ("python", 12), ("bash", 24)]


def test_a_failing_block_names_the_page_its_line_and_its_output(tmp_path: Path) -> None:
    page = tmp_path / "sample.md"
    page.write_text(SAMPLE, encoding="utf-8")
    workdir = tmp_path / "page"
    workdir.mkdir()
    run = PageRun(page, workdir)
    blocks = runnable_blocks(SAMPLE)
    run.run(0, blocks[0])
    run.run(1, blocks[1])  # sees the file and the variable the bash block exported
    with pytest.raises(pytest.fail.Exception) as failed:
        run.run(2, blocks[2])
    message = str(failed.value)
    assert f"{page}:24: bash block exited with status 1" in message
    assert "about to fail" in message
    assert "never printed" not in message.split("its output")[1]


def test_what_a_page_leaves_running_is_stopped(tmp_path: Path) -> None:
    workdir = tmp_path / "page"
    workdir.mkdir()
    run = PageRun(tmp_path / "page.md", workdir)
    run.run(0, Block("bash", 1, "sleep 600 &\necho $! > sleeper.pid\n"))
    pid = int((workdir / "sleeper.pid").read_text())
    os.kill(pid, 0)  # still running after its block ended
    run.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
