"""A registry for the browser tests, filled the way users fill one: ``kvreg deposit``, ``kvreg push``,
``kvreg pull`` and ``kvreg graft --receipt`` in subprocesses, and the admin API for the rest.

What it holds (``Seeded`` says where everything is):

- ``aime25`` (public): ``p07`` (question + solution of the demo), ``p07x`` (the same question, the
  solution and a check: it shares every full block of ``p07``), ``other`` (an unrelated ruling whose
  word ``counterparty`` appears in its solution text only), and ``xss`` (a title, question and
  solution full of markup that must be shown as text). A retention policy, a legal hold on
  ``other``, and one graft receipt for ``p07``.
- ``paging`` (public): ``ex01``... ``ex21``, small artifacts titled "Paging exercise NN" (one more
  than a page of results), pushed before the others so that they come last in "newest first".
- ``lab-private`` (private): ``secret``, readable only by ``carol`` (read role) and the admin.
- ``flywheel`` (public), as the demo's flywheel act leaves it: ``gsm8k-test-0001``, the first
  GSM8K test problem and its verified solution as a chat of the real SmolLM2-135M-Instruct
  (when the session has it: ``real_model``), pushed last, so that it leads "newest first".

The escaping test's artifact (``xss``) is pushed right after the paging ones, before the
realistic ones: it is there to be escaped, not to lead the home page.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.helpers import EXTENSION, QUESTION, SOLUTION, kvreg, kvreg_env
from integration.registry_server import Registry

BLOCK = 16
PUBLIC_NS = "aime25"
PRIVATE_NS = "lab-private"
PAGING_NS = "paging"  # public: more artifacts than a page of results holds
PAGING_COUNT = 21  # the web UI shows 20 results a page
FLYWHEEL_NS = "flywheel"  # public: a GSM8K chat artifact of the real model
GSM8K_QUESTION = (
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' market "
    "daily for $2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?"
)
GSM8K_SOLUTION = (
    "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\n"
    "She makes 9 * 2 = $18 every day at the farmer\u2019s market.\n#### 18"
)
WRITER = "dana"
KEY_LABEL = "dana's deposit key"  # the seeded signing key's label (its owner is dana)
READER = "carol"  # read role on the private namespace only
GRAFTER = "gina"  # read role on the public namespace: sends the graft receipt

BULK = Path(__file__).with_name("bulk_deposit.py")
SCRIPT = "<script>alert(1)</script>"
OTHER_TEXT = (
    "A compliance ruling: the transfer is permitted because the counterparty is registered "
    "and the amount is below the reporting threshold of 10,000 units. Reviewed and approved."
)
# A word of the ruling's solution text only (not of its title, question, tags or any other artifact).
SOLUTION_ONLY_WORD = "counterparty"
SECRET_TEXT = (
    "Internal evaluation note: the quarterly run of the lab model passed every held-out check. "
    "Codeword heliotrope marks this note as confidential."
)
SECRET_WORD = "heliotrope"


@dataclass(frozen=True)
class Artifact:
    name: str
    namespace: str
    prompt: str | None
    text: str
    title: str
    verifier: str
    verdict: str
    evidence: str
    tags: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


ARTIFACTS = (
    Artifact(
        "p07",
        PUBLIC_NS,
        QUESTION,
        SOLUTION,
        "Problem 7: pairs without a zero digit",
        "exhaustive-checker",
        "pass",
        '{"answer": "738"}',
        ("aime25", "number-theory"),
    ),
    Artifact(
        "p07x",
        PUBLIC_NS,
        QUESTION,
        SOLUTION + EXTENSION,
        "Problem 7, with the checker's count",
        "exhaustive-checker",
        "pass",
        '{"answer": "738"}',
        ("aime25",),
    ),
    Artifact("other", PUBLIC_NS, None, OTHER_TEXT, "Compliance ruling", "reviewer", "pass", '{"ok": true}'),
    Artifact(
        "xss",
        PUBLIC_NS,
        'Question <img src=x onerror="alert(2)"> & "quotes": what is 2 + 2?',
        f" Solution {SCRIPT} The answer is 4 <b>bold?</b> </textarea></code>",
        f"{SCRIPT} markup in a title",
        "hand<i>checked</i>",
        "unknown",
        '{"answer": "<script>alert(3)</script>"}',
        ("<svg onload=alert(4)>",),
    ),
    Artifact("secret", PRIVATE_NS, None, SECRET_TEXT, "Private lab note", "reviewer", "pass", '{"ok": true}'),
)

GSM8K = Artifact(
    "gsm8k-test-0001",
    FLYWHEEL_NS,
    GSM8K_QUESTION,
    GSM8K_SOLUTION,
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast …",
    "gsm8k-exact-answer",
    "pass",
    '{"answer": "18", "gold": "18"}',
    ("gsm8k",),
)


@dataclass
class Seeded:
    """Everything the browser tests need to know about the seeded registry."""

    registry: Registry
    url: str
    root: Path
    model: Path
    public_ns: str
    private_ns: str
    paging_ns: str
    admin_name: str
    admin_token: str
    reader_name: str
    reader_token: str
    writer_token: str
    tokens: dict[str, str]
    public_key: str
    log_key: str
    artifacts: dict[str, Artifact]
    digests: dict[str, str]
    manifests: dict[str, dict[str, Any]]
    pushes: dict[str, dict[str, Any]]
    audit_entries: list[dict[str, Any]] = field(default_factory=list)
    receipt: dict[str, Any] | None = None
    admin_home: Path = field(default_factory=Path)
    flywheel_ns: str = FLYWHEEL_NS

    def artifact_path(self, name: str) -> str:
        a = self.artifacts[name]
        return f"/ns/{a.namespace}/artifacts/{self.digests[name]}"

    def full_blocks(self, name: str) -> list[str]:
        return [
            c["digest"] for c in self.manifests[name]["chunks"] if int(c["end"]) - int(c["start"]) == BLOCK
        ]

    def chunk_digests(self, name: str) -> list[str]:
        return [c["digest"] for c in self.manifests[name]["chunks"]]


def _deposit(home: Path, model: Path, root: Path, a: Artifact, *, chat: bool = False) -> dict[str, Any]:
    text = root / f"{a.name}.text.txt"
    text.write_text(a.text, encoding="utf-8")
    args: list[str | Path] = ["deposit", model, "--text-file", text, "--ref", a.ref]
    if a.prompt is not None:
        prompt = root / f"{a.name}.prompt.txt"
        prompt.write_text(a.prompt, encoding="utf-8")
        args += ["--prompt-file", prompt]
    if chat:
        args.append("--chat")
    args += ["--block-size", str(BLOCK), "--verifier", a.verifier, "--verdict", a.verdict]
    args += ["--evidence", a.evidence, "--title", a.title]
    for tag in a.tags:
        args += ["--tag", tag]
    kvreg(home, *args)
    return kvreg(home, "show", a.ref, "--json").json


def _ok(r: Any, *codes: int) -> Any:
    assert r.status_code in codes, f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text}"
    return r


def seed(registry: Registry, root: Path, model: Path, real_model: Path | None = None) -> Seeded:
    depositor = root / "depositor"
    kvreg(depositor, "keys", "generate")
    public_key = kvreg(depositor, "keys", "export").out.strip()
    manifests: dict[str, dict[str, Any]] = {}
    for a in ARTIFACTS:
        manifests[a.name] = _deposit(depositor, model, root, a)
    artifacts = list(ARTIFACTS)
    if real_model is not None:
        manifests[GSM8K.name] = _deposit(depositor, real_model, root, GSM8K, chat=True)
        artifacts.append(GSM8K)
    bulk = subprocess.run(
        [sys.executable, str(BULK), str(depositor), str(model), PAGING_NS, str(PAGING_COUNT)],
        env=kvreg_env(depositor),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bulk.returncode == 0, bulk.stderr
    paging_refs = bulk.stdout.split()
    assert len(paging_refs) == PAGING_COUNT, bulk.stdout

    with registry.admin() as c:
        for ns, public in ((PUBLIC_NS, True), (PRIVATE_NS, False), (PAGING_NS, True), (FLYWHEEL_NS, True)):
            _ok(c.post("/namespaces", json={"name": ns, "public": public}), 201)
            key = {"public_key": public_key, "label": KEY_LABEL, "owner": WRITER}
            _ok(c.post(f"/namespaces/{ns}/keys", json=key), 201)
        tokens = {}
        for user, roles in (
            (WRITER, {PUBLIC_NS: "write", PRIVATE_NS: "write", PAGING_NS: "write", FLYWHEEL_NS: "write"}),
            (READER, {PRIVATE_NS: "read"}),
            (GRAFTER, {PUBLIC_NS: "read"}),
        ):
            _ok(c.post("/users", json={"name": user}), 201)
            for ns, role in roles.items():
                _ok(c.put(f"/namespaces/{ns}/roles/{user}", json={"role": role}), 204)
            tokens[user] = _ok(c.post(f"/users/{user}/tokens", json={"label": "browser tests"}), 201).json()[
                "token"
            ]

    kvreg(depositor, "remote", "add", "origin", registry.url)
    kvreg(depositor, "login", "origin", "--token", tokens[WRITER])
    for ref in paging_refs:
        kvreg(depositor, "push", "origin", ref)
    pushes: dict[str, dict[str, Any]] = {}
    entries: list[dict[str, Any]] = []
    # the escaping test's artifact first: realistic ones lead "newest first"
    for a in sorted(artifacts, key=lambda a: a.name != "xss"):
        pushes[a.name] = kvreg(depositor, "--json", "push", "origin", a.ref).json
        entries += [{**e, "ref": a.ref} for e in pushes[a.name]["audit"]["entries"]]
    digests = {name: str(p["digest"]) for name, p in pushes.items()}

    with registry.admin() as c:
        _ok(c.put(f"/namespaces/{PUBLIC_NS}/retention", json={"keep_versions": 20, "keep_days": 365}), 200)
        _ok(
            c.post(
                f"/namespaces/{PUBLIC_NS}/holds", json={"ref": "other", "reason": "litigation hold: case 42"}
            ),
            201,
        )

    # A host that pulls p07, grafts it and sends a signed receipt.
    grafter = root / "grafter"
    kvreg(grafter, "remote", "add", "origin", registry.url)
    kvreg(grafter, "login", "origin", "--token", tokens[GRAFTER])
    kvreg(grafter, "trust", "add", PUBLIC_NS, public_key)
    kvreg(grafter, "keys", "generate")
    kvreg(grafter, "pull", "origin", f"{PUBLIC_NS}/p07")
    graft = kvreg(
        grafter,
        "--json",
        "graft",
        f"{PUBLIC_NS}/p07",
        "--model",
        model,
        "--max-new-tokens",
        "2",
        "--receipt",
        "origin",
    ).json

    # The admin's own client store: the log key it pins verifies exports offline.
    admin_home = root / "admin"
    kvreg(admin_home, "remote", "add", "origin", registry.url)
    kvreg(admin_home, "login", "origin", "--token", registry.admin_token)
    log_key = kvreg(admin_home, "--json", "audit", "show", "origin").json["verifier_key"]

    return Seeded(
        registry=registry,
        url=registry.url,
        root=root,
        model=model,
        public_ns=PUBLIC_NS,
        private_ns=PRIVATE_NS,
        paging_ns=PAGING_NS,
        tokens=tokens,
        admin_name="root",
        admin_token=registry.admin_token,
        reader_name=READER,
        reader_token=tokens[READER],
        writer_token=tokens[WRITER],
        public_key=public_key,
        log_key=log_key,
        artifacts={a.name: a for a in artifacts},
        digests=digests,
        manifests=manifests,
        pushes=pushes,
        audit_entries=entries,
        receipt=graft.get("receipt"),
        admin_home=admin_home,
    )
