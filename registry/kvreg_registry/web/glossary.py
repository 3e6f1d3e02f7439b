"""The words the web UI uses that a newcomer may not know, each with a one-line explanation
(shown on hover and to screen readers where the word appears) and a paragraph on the
glossary page (``/glossary``, one anchor per term: ``/glossary#graft``).

Templates explain a term with the ``term`` macro of ``templates/explain.html``
(``{{ x.term("kv-heads", "KV heads") }}``): the word in an ``<abbr>`` whose title is
:attr:`Term.short`, and a "what is this?" link to its anchor. Pure data: no database, no HTML
(the texts are plain and escaped by the templates).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    id: str  # the anchor on /glossary
    word: str  # the term as the pages write it
    short: str  # one line: the hover text
    long: str  # the glossary's paragraph
    see: tuple[str, ...] = ()  # related terms (ids)


TERMS: tuple[Term, ...] = (
    Term(
        "artifact",
        "Artifact",
        "A signed, content-addressed KV-cache state of a model for one text, with the text and its "
        "verification.",
        "A model's key/value cache for one text (usually a question and its verified solution), cut into "
        "blocks, with the text itself, the tokens, the model's next-token logits at the end (the witness) "
        "and a manifest that lists them by digest. The manifest is signed; the artifact is named by the "
        "digest of its manifest, so the same name always means the same bytes.",
        ("kv-cache", "block", "witness", "signature"),
    ),
    Term(
        "kv-cache",
        "KV cache",
        "The keys and values a transformer computes for every token it has read; reusing them skips "
        "that work.",
        "While a transformer reads a text it computes, in every layer, a key and a value vector per token "
        "and KV head. Keeping them (the KV cache) is what lets a model continue a text without reading it "
        "again. kvreg stores that cache so that another host can graft it instead of recomputing it.",
        ("kv-heads", "graft"),
    ),
    Term(
        "kv-heads",
        "KV heads",
        "Attention heads that have their own keys and values; '2 KV heads × 16' means two such heads "
        "of 16 numbers each.",
        "Each layer of a transformer stores keys and values per KV head (with grouped-query attention "
        "several query heads share one KV head). '9 layers, 2 KV heads × 64, float32' says that each "
        "token takes 9 × 2 (key and value) × 2 × 64 numbers of 4 bytes in the cache: the KV cache per "
        "token, which decides how much a graft reads.",
        ("kv-cache",),
    ),
    Term(
        "block",
        "Block and chunk",
        "The cache is cut into blocks of a fixed number of tokens; each block is stored as one "
        "chunk, by its digest.",
        "A deposit prefills the text block by block (64 tokens by default) and stores each block's KV "
        "cache as one chunk, named by its SHA-256. A chunk that several artifacts share (the same "
        "question, the same first tokens) is stored once. The last block may be partial.",
        ("prefix",),
    ),
    Term(
        "graft",
        "Graft",
        "Loading a stored KV cache into a model instead of computing it, then continuing from there.",
        "`kvreg graft` checks the signature and the digests, refuses unless this host's model, tokenizer "
        "and configuration fingerprints equal the artifact's, builds the cache at the original positions, "
        "runs the witness probe and decodes. With a prompt it grafts the longest part of the artifact "
        "that the prompt starts with (whole blocks) and computes only the rest.",
        ("witness", "byte-exact", "receipt", "fingerprint"),
    ),
    Term(
        "byte-exact",
        "Byte-exact",
        "After a graft the model's outputs had the same bits (SHA-256-equal logits) as computing "
        "everything afresh.",
        "`kvreg graft --check` computes the same prompt again from nothing under the same schedule and "
        "compares the logits of every decode step by their SHA-256. Byte-exact means every step was equal: "
        "the graft changed nothing, not even a rounding. 'Byte-exact grafts by 2 hosts' counts the hosts "
        "(by configuration fingerprint) whose receipts say so.",
        ("receipt", "no-logits-check"),
    ),
    Term(
        "no-logits-check",
        "No logits check",
        "The host grafted without --check: nobody compared its outputs with a fresh computation.",
        "A receipt without a check says the host grafted the artifact (and whether the witness probe "
        "passed) but did not recompute the prompt to compare logits. It is neither byte-exact nor not "
        "byte-exact: it was not checked.",
        ("byte-exact", "witness"),
    ),
    Term(
        "witness",
        "Witness",
        "The logits the depositor recorded after the last token; a graft's probe recomputes the last "
        "block and compares.",
        "A deposit records the model's next-token logits at the end of the text: the witness. Before "
        "decoding, a graft's witness probe recomputes the last grafted block and compares its bits (and, "
        "at the artifact's end, the hash of the logits). 'pass' means they were equal, 'fail' that this "
        "host computes differently in a way no fingerprint captured, 'skipped' that it ran with --no-probe.",
        ("graft",),
    ),
    Term(
        "receipt",
        "Graft receipt",
        "A host's signed statement that it grafted this artifact, with its configuration and what "
        "its checks found.",
        "After a graft, `kvreg graft --receipt REMOTE` sends a receipt: which artifact, the host's "
        "fingerprints and device, the witness probe's result and the byte-exact check's, signed by the "
        "host's key. The registry says whether that key is registered for the namespace; who the key "
        "belongs to is for you to judge.",
        ("byte-exact", "witness", "signature"),
    ),
    Term(
        "verdict",
        "Verdict",
        "What the depositor's verifier said about the solution: pass, fail or unknown; 'not "
        "verified' when none was recorded.",
        "A deposit may carry a verification: the verifier (a checker program, a person, a test suite), its "
        "verdict and its evidence (for example the expected answer). kvreg signs it with the artifact but "
        "does not run the verifier: the verdict is the depositor's claim, as trustworthy as their key.",
        ("verifier", "signature"),
    ),
    Term(
        "verifier",
        "Verifier",
        "Who or what checked the solution (a checker program, a test suite, a person), as the "
        "depositor names it.",
        "The name the depositor gives the check that produced the verdict. The library can be filtered by "
        "verifier to see everything one checker passed or failed.",
        ("verdict",),
    ),
    Term(
        "signature",
        "Signature and signer",
        "The manifest is signed with an Ed25519 key; the page checks it now against the namespace's "
        "registered keys.",
        "Every artifact's manifest is signed (a DSSE envelope) by the depositor's key. The registry accepts "
        "a push only if the key is registered for the namespace, and the page checks the signature again "
        "each time it is shown: a key revoked since shows as 'NOT verified'. `kvreg pull` checks it against "
        "your own trust policy.",
        ("artifact",),
    ),
    Term(
        "fingerprint",
        "Fingerprint",
        "A digest of the model's weights, the tokenizer or the numerics configuration; a graft needs "
        "all three equal.",
        "The model fingerprint hashes the weights and the model's config.json, the tokenizer "
        "fingerprint the tokenizer's files, the configuration fingerprint the pinned numerics "
        "(dtype, threads, "
        "kernels, library versions). A host whose fingerprints differ is refused, with every field that "
        "differs. Hosts are counted by their configuration fingerprint.",
        ("graft",),
    ),
    Term(
        "merkle-root",
        "Merkle root",
        "One digest over all the chunk digests, in order: it commits to every block of the artifact.",
        "The chunks' digests are the leaves of a Merkle tree (RFC 6962 hashing); its root is in the "
        "signed manifest. It lets kvreg prove that one artifact's blocks are a prefix of another's "
        "without reading the chunks.",
        ("prefix", "leaf-hash"),
    ),
    Term(
        "leaf-hash",
        "SHA-256(0x00 ‖ …)",
        "How a Merkle tree leaf is hashed (RFC 6962): a zero byte, then the bytes, so a leaf can "
        "never pass for a node.",
        "A Merkle tree leaf's hash is SHA-256 of the byte 0x00 followed by the leaf's bytes (‖ means "
        "'followed by'); an inner node's is SHA-256 of 0x01, the left hash and the right hash. The audit "
        "log's entries and an artifact's chunks are hashed this way, so an inclusion or consistency "
        "proof can be checked by anyone with the root.",
        ("merkle-root", "audit-log"),
    ),
    Term(
        "prefix",
        "Prefix relation and proof",
        "One artifact's blocks are the first blocks of another's; a Merkle consistency proof shows it.",
        "Two artifacts with the same model, tokenizer, configuration and block size whose first blocks are "
        "the same: the longer extends the shorter, and a host grafting the longer one reuses the shorter's "
        "chunks. The pages list a relation only when its Merkle consistency proof checks.",
        ("merkle-root", "block"),
    ),
    Term(
        "ref",
        "Ref and tag",
        "A name in a namespace (aime25/p07) that points at an artifact; a ref can move, a tag cannot.",
        "`kvreg pull REMOTE NS/NAME` pulls what the ref points at now. Pushing to a ref again moves it "
        "(the audit log records each move); a tag is created once and never moves.",
        ("namespace",),
    ),
    Term(
        "namespace",
        "Namespace",
        "A named collection of artifacts with its own readers, writers, admins, signing keys and policies.",
        "Every artifact lives in a namespace (aime25, gsm8k). A namespace is public (anyone may read it) "
        "or private (its members only); its admins register the signing keys a push must be signed with, "
        "set its retention policy and describe it.",
        ("ref", "signature"),
    ),
    Term(
        "audit-log",
        "Audit log",
        "An append-only, Merkle-hashed record of every change; clients check that it only ever grows.",
        "Every push, ref move, key change, receipt and hold is an entry of the audit log. Entries are "
        "leaves of a Merkle tree whose signed checkpoints clients pin: `kvreg audit verify` proves that "
        "the log they see now extends the one they saw before, so no entry was changed or removed.",
        ("leaf-hash",),
    ),
)

BY_ID: dict[str, Term] = {t.id: t for t in TERMS}


def short(term_id: str) -> str:
    """The hover text of a term (a missing id is a template bug: it raises)."""
    return BY_ID[term_id].short


def word(term_id: str) -> str:
    """The term as the pages write it."""
    return BY_ID[term_id].word
