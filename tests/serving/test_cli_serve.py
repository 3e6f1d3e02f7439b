"""``kvreg engine serve`` as users start it: a real ``python -m kvreg`` process on loopback,
printing where it listens (before the model is loaded) and when it is ready, answering the
``openai`` client and ``/health``, and stopping on SIGINT."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import openai

from cli.helpers import kvreg_env


def test_the_command_serves_the_openai_api_until_interrupted(tiny_models: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    model = tiny_models["llama-chat"]
    cmd = [sys.executable, "-m", "kvreg", "engine", "serve", "--model", str(model), "--name", "tiny"]
    cmd += ["--port", "0", "--block-size", "8", "--max-tokens", "6", "--max-queue", "1"]
    proc = subprocess.Popen(
        cmd, env=kvreg_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    found = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "serving" in line:
                found.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert found.wait(240), "".join(lines)
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", "".join(lines))
        assert match is not None, "".join(lines)
        client = openai.OpenAI(base_url=match.group(1), api_key="unused", max_retries=0, timeout=120)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert chat.usage is not None and chat.usage.completion_tokens <= 6
        assert chat.model_extra["kvreg"]["mode"] == "off"  # type: ignore[index]  # an empty store
        said = "".join(lines)
        assert said.index("listening at") < said.index("serving")  # it listened before it loaded
        root = match.group(1).removesuffix("/v1")
        assert httpx.get(root + "/health", timeout=60).json()["status"] == "ok"
        assert httpx.get(root + "/version", timeout=60).json()["server"]["max_queue"] == 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        reader.join(10)
    assert code in (0, 130), "".join(lines)
