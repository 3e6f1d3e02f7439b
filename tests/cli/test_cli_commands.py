"""The command surface: help, start-up cost, global options, keys and trust, the demo."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from kvreg.cli.main import build_app, main

from .helpers import kvreg, kvreg_env

COMMANDS = [
    [],
    ["keys"],
    ["keys", "generate"],
    ["keys", "list"],
    ["keys", "export"],
    ["trust"],
    ["trust", "add"],
    ["trust", "list"],
    ["trust", "remove"],
    ["deposit"],
    ["graft"],
    ["verify"],
    ["show"],
    ["ls"],
    ["cat"],
    ["fsck"],
    ["gc"],
    ["demo"],
    ["serve"],
    ["remote"],
    ["remote", "add"],
    ["remote", "list"],
    ["remote", "remove"],
    ["login"],
    ["logout"],
    ["push"],
    ["pull"],
    ["ls-remote"],
]


def call(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``kvreg ARGS`` in this process (fast: for commands that do not load the engine)."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "kvreg")
def test_help_works_for_every_command(capsys, command):
    rc, out, _ = call(capsys, *command, "--help")
    assert rc == 0
    assert "Usage" in out
    assert f"kvreg {' '.join(command)}".strip() in out


def _every_command(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _every_command(sub, (*path, name))


def test_help_paragraphs_fit_an_80_column_terminal():
    """The help keeps a docstring's line breaks (rich markup): a prose line longer than the
    terminal wraps into a stray short line. Indented lines (examples) may be longer."""
    too_long = []
    for path, command in _every_command(typer.main.get_command(build_app())):
        _, _, rest = (command.help or "").partition("\n\n")  # the first paragraph is re-flowed
        for line in rest.splitlines():
            if line[:1] not in ("", " ") and len(line) > 78:
                too_long.append(f"kvreg {' '.join(path)}: {line[:40]}... ({len(line)} characters)")
    assert not too_long, "\n".join(too_long)


def test_help_and_version_do_not_import_torch(tmp_path):
    env = kvreg_env(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kvreg", "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Usage" in proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "kvreg.cli.main" in imported
    heavy = {m for m in imported if m.split(".")[0] in ("torch", "transformers", "safetensors", "numpy")}
    assert not heavy, sorted(heavy)[:10]
    version = kvreg(tmp_path, "--version")
    assert version.out.strip().startswith("kvreg ")


def test_usage_errors_exit_2(capsys, tmp_path):
    assert call(capsys, "--home", tmp_path, "no-such-command")[0] == 2
    rc, out, _ = call(capsys, "--home", tmp_path, "--json", "graft")
    assert rc == 2
    assert json.loads(out)["error"]["code"] == "USAGE"
    assert call(capsys, "--home", tmp_path, "gc", "--grace", "soon")[0] == 2
    assert call(capsys, "--home", tmp_path, "cat", "sha256:XYZ")[0] == 2


def test_keys_generate_list_export(capsys, tmp_path):
    home = tmp_path / "home"
    rc, out, _ = call(capsys, "--home", home, "keys", "generate", "--json")
    assert rc == 0
    made = json.loads(out)
    assert made["trusted_for"] == ["*"]
    key_file = home / "keys" / "default.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "keys").stat().st_mode) == 0o700
    assert (home / "keys" / "default.pub").read_text().strip() == made["public_key"]
    policy = json.loads((home / "trust.json").read_text())
    assert policy["namespaces"]["*"] == [made["public_key"]]

    rc, out, err = call(capsys, "--home", home, "--json", "keys", "generate")
    assert rc == 1
    assert json.loads(out)["error"]["code"] == "KEY_INVALID"
    assert "--force" in err
    assert key_file.read_bytes()  # untouched

    rc, out, _ = call(capsys, "--home", home, "keys", "generate", "--name", "ci", "--no-trust", "--json")
    assert rc == 0 and json.loads(out)["trusted_for"] == []
    rc, out, _ = call(capsys, "--home", home, "keys", "list", "--json")
    listed = {k["name"]: k for k in json.loads(out)["keys"]}
    assert set(listed) == {"default", "ci"}
    assert listed["default"]["trusted_for"] == ["*"] and listed["ci"]["trusted_for"] == []
    rc, out, _ = call(capsys, "--home", home, "keys", "export")
    assert out.strip() == made["public_key"]
    assert call(capsys, "--home", home, "keys", "export", "--name", "nope")[0] == 1
    assert call(capsys, "--home", home, "keys", "generate", "--name", "../evil")[0] == 2

    rc, _, _ = call(capsys, "--home", home, "keys", "generate", "--force")
    assert rc == 0
    rc, out, _ = call(capsys, "--home", home, "keys", "export", "--json")
    assert json.loads(out)["public_key"] != made["public_key"]


def test_trust_add_list_remove(capsys, tmp_path):
    home = tmp_path / "home"
    call(capsys, "--home", home, "keys", "generate", "--name", "ci", "--no-trust")
    public = (home / "keys" / "ci.pub").read_text().strip()
    rc, out, _ = call(capsys, "--home", home, "trust", "add", "aime25", public, "--json")
    assert rc == 0
    keyid = json.loads(out)["keyid"]
    # The same key from its .pub file, and from a PEM file, for another namespace.
    assert call(capsys, "--home", home, "trust", "add", "other", home / "keys" / "ci.pub")[0] == 0
    from kvreg.core.keys import PublicKey

    pem = tmp_path / "ci.pem"
    pem.write_bytes(PublicKey.from_text(public).to_pem())
    assert call(capsys, "--home", home, "trust", "add", "third", pem)[0] == 0
    rc, out, _ = call(capsys, "--home", home, "trust", "list", "--json")
    rows = json.loads(out)["trust"]
    assert {(r["namespace"], r["keyid"], r["local_key"]) for r in rows} == {
        ("aime25", keyid, "ci"),
        ("other", keyid, "ci"),
        ("third", keyid, "ci"),
    }
    assert call(capsys, "--home", home, "trust", "remove", "aime25", keyid)[0] == 0
    assert call(capsys, "--home", home, "trust", "remove", "aime25", keyid)[0] == 1  # not trusted any more
    assert call(capsys, "--home", home, "trust", "remove", "other", public)[0] == 0  # by key text
    rc, out, _ = call(capsys, "--home", home, "trust", "list", "--json")
    assert [r["namespace"] for r in json.loads(out)["trust"]] == ["third"]
    assert call(capsys, "--home", home, "trust", "add", "Bad/NS", public)[0] == 2
    assert call(capsys, "--home", home, "trust", "add", "ns", "ed25519:not-base64")[0] == 1
    assert call(capsys, "--home", home, "trust", "add", "ns", tmp_path / "missing.pub")[0] == 2


def test_engine_defaults_known_before_torch_match_the_engine():
    from kvreg.app import engine_options
    from kvreg.engine.pinned import EngineSettings

    defaults = EngineSettings()
    assert defaults.device == engine_options.DEFAULT_DEVICE
    assert defaults.profile == engine_options.DEFAULT_PROFILE


def _demo_pages_show_the_receipts(workdir: Path, reg: dict, fw: dict) -> None:
    """The demo's registry, served in process: its artifact pages lead with the receipts it was sent."""
    from fastapi.testclient import TestClient

    from kvreg.remote.remotes import Credentials
    from kvreg.store.home import Home
    from kvreg_registry.app import create_app
    from kvreg_registry.settings import Settings
    from web.helpers import sign_in

    app = create_app(Settings(data_dir=Path(reg["data"])))
    with TestClient(app, base_url="http://testserver") as client:
        # The flywheel's library is public: anyone sees who grafted its artifacts.
        ref = fw["receipts"][0]["ref"]
        page = client.get(f"/ns/{ref.split('/')[0]}/refs/{ref.split('/', 1)[1]}")
        assert page.status_code == 200, page.text
        assert "They come from 1 host." in page.text and "demo signer" in page.text
        assert "kvreg&#39;s bundled addition model" in page.text  # not just "model"
        # demo/p07 is private: its reader signs in with the token the second home logged in with.
        auth = Credentials(Home(Path(reg["second_home"])), environ={}).auth_for(reg["remote"])
        assert auth is not None
        sign_in(client, auth.token)
        page = client.get("/ns/demo/refs/p07")
        assert page.status_code == 200, page.text
        assert "byte-exact grafts by 1 host</a>" in page.text  # the trust line, near the top
        assert "1 receipt: 1 byte-exact. They come from 1 host." in page.text
        assert f'href="/audit/entries/{reg["receipt"]["log_index"]}"' in page.text
        # The audit trail's default view shows the pushes, folded, not a row per object held.
        trail = client.get("/audit")
        assert trail.status_code == 200, trail.text
        held = '<td data-label="Type"><code>object.held</code></td>'
        assert '<tr class="push-group"' in trail.text and held not in trail.text
        assert held in client.get("/audit", params={"all": "1"}).text


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path, demo_run):
    # One `python -m kvreg demo` run per session (tests/demo_run.py), shared with the web-pages
    # bench smoke test, made with KVREG_TOKEN, KVREG_DATABASE_URL and KVREG_STORAGE pointing
    # nowhere: the demo's registry uses the embedded defaults and the tokens it logged in with.
    workdir = demo_run.workdir
    run = demo_run.run
    assert run.rc == 0, str(run)
    report = run.json
    assert report["ok"] is True, report["failures"]
    assert [g["check"]["byte_exact"] for g in report["grafts"]] == [True, True]
    assert all(g["check"]["sha256_equal_steps"] == 32 for g in report["grafts"])
    assert report["dedupe"]["shared_chunks"] > 0
    assert report["dedupe"]["new_chunks"] < report["dedupe"]["chunk_count"]
    assert report["refusal"]["code"] == "FINGERPRINT_MISMATCH"
    assert report["recompute"]["byte_exact"] is True
    assert "demo:" in run.err  # progress on stderr
    assert not demo_run.unused_home.exists()  # the demo uses its own store
    assert (workdir / "home" / "refs" / "demo" / "p07").is_file()

    reg = report["registry"]
    assert reg["backend"] == "sqlite+folder"
    assert reg["bootstrap"]["whoami"]["home"]["admin"] is True
    assert reg["bootstrap"]["whoami"]["second_home"]["roles"] == {"demo": "read"}
    push, pull, again = reg["push"], reg["pull"], reg["second_push"]
    assert push["objects_sent"] == push["objects_total"] > 0
    assert push["bytes_sent"] == push["bytes_total"] > 0
    assert pull["digest"] == push["digest"] and reg["same_manifest"] is True
    assert pull["objects_downloaded"] == pull["objects_total"] and pull["objects_local"] == 0
    assert pull["bytes_downloaded"] == push["bytes_sent"]
    assert pull["signer"] == reg["bootstrap"]["key_id"]
    # The pulled copy, in a home that trusts only the demo key, grafts byte-exactly.
    check = reg["graft"]["check"]
    assert reg["byte_exact"] is True and check["byte_exact"] is True
    assert check["sha256_equal_steps"] == check["steps"] == 32
    assert (workdir / "second-home" / "refs" / "demo" / "p07").is_file()
    # ... and sends its graft receipt, signed with the demo key, stored with an audit entry.
    receipt = reg["receipt"]
    assert receipt["ref"] == "demo/p07" and receipt["digest"] == push["digest"]
    assert receipt["byte_exact"] is True and receipt["created"] is True
    assert receipt["signer"] == reg["bootstrap"]["key_id"] and receipt["log_index"] > 0
    # Pushing again sends nothing; the longer artifact sends only its new chunks, both ways.
    assert again["objects_sent"] == 0 and again["bytes_sent"] == 0 and again["ref_changed"] is False
    longer_push, longer_pull = reg["push_longer"], reg["pull_longer"]
    assert 0 < longer_push["objects_sent"] < longer_push["objects_total"]
    assert 0 < longer_push["bytes_sent"] < longer_push["bytes_total"]
    assert longer_pull["objects_downloaded"] == longer_push["objects_sent"]
    assert longer_pull["objects_local"] == longer_pull["objects_total"] - longer_push["objects_sent"]
    assert (workdir / "registry" / "data" / "registry.sqlite3").is_file()
    # The server is stopped when the demo returns (checked then, by tests/demo_run.py).
    assert demo_run.server_stopped is True

    # The flywheel act: library pushed, second exam in a fresh home that pulls on demand.
    fw = report["flywheel"]
    m = fw["metrics"]
    assert fw["library"]["entries"] == 4 and fw["push"]["refs"] == 4
    assert m["knowledge_grafts"] == 4 and m["repeat_accuracy_after"] == 1.0
    assert m["wrong_grafts"] == 0 and m["unseen_knowledge_grafts"] == 0
    assert m["byte_exact_passed"] == m["byte_exact_checks"] == 6
    assert m["repeat_decoded_tokens_after"] == 1.0
    assert m["fetched_bytes"] > 0  # the asking home had nothing: it pulled what it grafted
    # The second exam's checked grafts send their receipts, byte-exact, one per knowledge graft.
    assert len(fw["receipts"]) == m["knowledge_grafts"] == 4
    assert all(r["byte_exact"] is True and r["ref"].startswith("flywheel/") for r in fw["receipts"])
    assert fw["host"]["config_fingerprint"] == fw["config_fingerprint"]
    asking = Path(fw["registry"]["asking_home"])
    assert asking == workdir / "flywheel-home"
    assert sorted(p.name for p in (asking / "refs" / "flywheel").iterdir()) == sorted(
        r.split("/", 1)[1] for r in fw["library"]["refs"]
    )

    # The registry the demo leaves behind shows that evidence on the artifact pages (read from a
    # copy: signing in writes a session, and the session's demo run is shared).
    copied = demo_run.copy_registry_data(tmp_path / "registry-data")
    _demo_pages_show_the_receipts(workdir, copied["registry"], fw)

    # The human-readable rendering of the same report.
    from rich.console import Console

    from kvreg.cli.demo import _render

    console = Console(record=True, width=200, force_terminal=False)
    _render(console, report)
    text = console.export_text()
    assert "6. share through a registry" in text
    assert "push demo/p07 again" in text
    assert "graft in the second home with --check: byte-exact, 32/32" in text
    sent = f"graft receipt sent for demo/p07 (byte-exact, signed with the demo key): receipt {receipt['id']}"
    assert sent in text
    assert "7. the verified-knowledge flywheel" in text
    assert "byte-exact checks" in text and "6/6 passed" in text
    assert "the asking home sent 4 graft receipts (4 byte-exact) to the registry" in text
    assert "kvreg serve --data" in text
    assert "demo passed" in text

    rerun = kvreg(tmp_path, "demo", "--workdir", workdir, expect=2)
    assert "not an empty folder" in rerun.err


def test_unexpected_errors_exit_1_with_a_short_message(capsys, tmp_path, monkeypatch):
    from kvreg.cli import maintenance

    def boom(*args, **kwargs):
        raise RuntimeError("something broke")

    monkeypatch.setattr(maintenance, "collect_garbage", boom)
    rc, out, err = call(capsys, "--home", tmp_path, "gc")
    assert rc == 1
    assert "unexpected RuntimeError: something broke" in err
    assert "Traceback" not in err
    rc, out, err = call(capsys, "--home", tmp_path, "-v", "--json", "gc")
    assert rc == 1
    assert json.loads(out)["error"]["code"] == "INTERNAL"
    assert "Traceback" in err


def test_a_full_disk_or_a_refused_write_is_a_typed_error_not_an_unexpected_one(capsys, tmp_path, monkeypatch):
    import errno

    from kvreg.cli import maintenance

    def refuse(number: int, filename: str | None):
        def fail(*args, **kwargs):
            raise OSError(number, os.strerror(number), filename)

        return fail

    monkeypatch.setattr(maintenance, "collect_garbage", refuse(errno.ENOSPC, None))
    rc, out, err = call(capsys, "--home", tmp_path, "--json", "gc")
    assert rc == 1 and "unexpected" not in err
    error = json.loads(out)["error"]
    assert error["code"] == "DISK_FULL" and "No space left on device" in error["message"]
    assert "kvreg gc" in error["hint"]
    monkeypatch.setattr(maintenance, "collect_garbage", refuse(errno.EROFS, "/store/objects/ab"))
    rc, out, err = call(capsys, "--home", tmp_path, "gc")
    assert rc == 1 and "Read-only file system" in err and "/store/objects/ab" in err
    assert "unexpected" not in err
    monkeypatch.setattr(maintenance, "collect_garbage", refuse(errno.EIO, None))
    rc, out, err = call(capsys, "--home", tmp_path, "gc")
    assert rc == 1 and "unexpected OSError" in err  # other I/O errors stay unexpected
