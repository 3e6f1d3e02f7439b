"""The compare page (/compare?a=NS/REF&b=NS/sha256:…): shared blocks and tokens, where the texts
diverge, incompatible artifacts, access, escaping, bounded queries."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import open_library
from .helpers import sign_in
from .library import Library, count_queries

SHORT = "a b c d e f g h"  # 8 tokens: 2 full blocks of 4
LONG = "a b c d e f g h i j k"  # 11 tokens: the same 2 full blocks and a partial one


@pytest.fixture
def big_library(tmp_path: Path) -> Iterator[Library]:
    yield from open_library(tmp_path / "big")


def section(page: str, ident: str) -> str:
    start = page.index(">", page.index(f'id="{ident}"')) + 1
    end = page.find("<section", start)
    return page[start : end if end != -1 else len(page)]


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def compare(library: Library, a: str, b: str, status: int = 200) -> str:
    r = library.client.get("/compare", params={"a": a, "b": b})
    assert r.status_code == status, r.text
    return r.text


def pres(fragment: str, cls: str) -> str:
    match = re.search(rf'<pre class="[^"]*{cls}[^"]*">(.*?)</pre>', fragment, re.S)
    assert match is not None, (cls, fragment)
    text = html.unescape(match.group(1))
    return text[1:] if text.startswith("\n") else text  # as HTML parsers do after <pre>


def test_without_both_artifacts_the_page_shows_the_form(library: Library) -> None:
    for params in ({}, {"a": "ns/x"}, {"b": "ns/x", "a": " "}):
        r = library.client.get("/compare", params=params)
        assert r.status_code == 200
        assert '<form id="compare" method="get" action="/compare"' in r.text
        assert 'name="a"' in r.text and 'name="b"' in r.text
        assert '<label for="compare-a">' in r.text and '<label for="compare-b">' in r.text
        assert 'id="shared-blocks"' not in r.text


def test_an_artifact_and_its_extension(library: Library) -> None:
    ns = library.namespace()
    short = library.publish(ns, "short", SHORT, title="Short one")
    long = library.publish(ns, "long", LONG, title="Long one")
    page = compare(library, f"{ns}/short", f"{ns}/{long.digest}")
    assert f'value="{ns}/short"' in page and f'value="{ns}/{long.digest}"' in page  # kept in the form
    sides = re.findall(r'<section class="side".*?</section>', page, re.S)
    assert len(sides) == 2
    assert "Short one" in sides[0] and "Tokens 8" in text_of(sides[0]) and "2 (2 full" in text_of(sides[0])
    assert "Long one" in sides[1] and "Tokens 11" in text_of(sides[1]) and "3 (2 full" in text_of(sides[1])
    assert f'href="/ns/{ns}/artifacts/{short.digest}"' in sides[0]
    assert "tiny-llama" in text_of(sides[1])
    assert 'id="compatible"' in page and 'id="incompatible"' not in page
    blocks = text_of(section(page, "shared-blocks"))
    assert blocks.startswith("Shared blocks 2 leading full blocks in common (of 2 full blocks")
    assert "proof checked" in blocks
    tokens = text_of(section(page, "shared-tokens"))
    assert "Shared tokens 8 leading token ids in common (of 8 and 11)" in tokens
    divergence = section(page, "divergence")
    assert f"agree on their first {len(SHORT)} characters" in text_of(divergence)
    assert pres(divergence, "context") == SHORT
    assert "(the text ends here)" in divergence and pres(divergence, "after-b") == " i j k"


def test_texts_that_diverge_inside_a_block(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "one", "a b c d e f x y z", title="One")
    library.publish(ns, "two", "a b c d e f g h", title="Two")
    page = compare(library, f"{ns}/one", f"{ns}/two")
    blocks = text_of(section(page, "shared-blocks"))
    # Block 0 (a b c d) is shared; block 1 (e f x y / e f g h) is not: no prefix to prove.
    assert blocks.startswith("Shared blocks 1 leading full block in common (of 2 full blocks")
    assert "They part at block 1: the first block is the same KV cache, then they differ" in blocks
    assert "neither is a prefix of the other. That is normal for two different texts." in blocks
    assert "not a prefix: not a prefix" not in blocks and "chunk 1 differs" not in blocks
    assert 'class="proof note"' in section(page, "shared-blocks")  # neutral, not alarm red
    assert "6 leading token ids in common" in text_of(section(page, "shared-tokens"))
    divergence = section(page, "divergence")
    assert "agree on their first 12 characters" in text_of(divergence)
    assert pres(divergence, "context") == "a b c d e f "
    assert pres(divergence, "after-a") == "x y z" and pres(divergence, "after-b") == "g h"
    headings = [text_of(h) for h in re.findall(r"<h3>(.*?)</h3>", divergence, re.S)]
    assert headings == [
        "The text they share, up to where they part",
        "How the first text goes on (One)",
        "How the second text goes on (Two)",
    ]
    assert "Then " not in text_of(divergence)


def test_blocks_that_differ_from_the_first_say_so_plainly(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "one", "x b c d e f g h", title="One")
    library.publish(ns, "two", "a b c d e f g h", title="Two")
    page = compare(library, f"{ns}/one", f"{ns}/two")
    blocks = section(page, "shared-blocks")
    assert "They part at block 0: their first blocks already differ" in text_of(blocks)
    assert "bad" not in blocks and "not a prefix:" not in blocks


def test_different_tokenizers_do_not_count_token_ids(library: Library) -> None:
    from kvreg.core.digest import Digest

    ns = library.namespace()
    library.publish(ns, "one", LONG, title="One")
    library.publish(ns, "two", LONG, title="Two", tokenizer_fp=Digest.of_bytes(b"another tokenizer"))
    page = compare(library, f"{ns}/one", f"{ns}/two")
    tokens = section(page, "shared-tokens")
    assert 'id="tokenizers-differ"' in tokens
    assert "The tokenizers differ" in text_of(tokens) and "not compared" in text_of(tokens)
    assert "leading token id" not in text_of(tokens)
    assert 'id="incompatible" class="note"' in page and "tokenizers differ: no shared KV" in page
    assert "the texts are identical" in text_of(section(page, "divergence"))


def test_the_model_is_named_with_its_architecture_and_size(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "one", SHORT, model_name="model")
    library.publish(ns, "two", SHORT, model_name="smollm2")
    page = compare(library, f"{ns}/one", f"{ns}/two")
    models = [text_of(m) for m in re.findall(r'<dd class="model">(.*?)</dd>', page, re.S)]
    assert models[0].startswith("unnamed Llama model LlamaForCausalLM, ")
    assert models[1].startswith("SmolLM2-135M-Instruct LlamaForCausalLM, ")
    assert all("layers" in m and "KV heads" in m and "sha256:" in m for m in models)


def test_identical_texts_in_two_namespaces(library: Library) -> None:
    one, two = library.namespace(), library.namespace()
    a = library.publish(one, "p", LONG, title="Here")
    library.publish(two, "p", LONG, title="There")
    page = compare(library, f"{one}/{a.digest}", f"{two}/p")
    assert "the texts are identical" in text_of(section(page, "divergence"))
    assert "11 leading token ids in common" in text_of(section(page, "shared-tokens"))
    assert "2 leading full blocks in common" in text_of(section(page, "shared-blocks"))


def test_different_block_sizes_cannot_share_kv(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "four", LONG, block_size=4)
    library.publish(ns, "eight", LONG, block_size=8)
    page = compare(library, f"{ns}/four", f"{ns}/eight")
    assert 'id="incompatible"' in page
    assert "block sizes differ: no shared KV is possible" in text_of(section(page, "compatibility"))
    blocks = text_of(section(page, "shared-blocks"))
    assert "0 leading full blocks in common" in blocks and "No consistency proof" in blocks
    # Tokens and texts are still compared.
    assert "11 leading token ids in common" in text_of(section(page, "shared-tokens"))
    assert "the texts are identical" in text_of(section(page, "divergence"))


def test_bad_or_unknown_artifacts(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "p", SHORT)
    compare(library, "no-slash", f"{ns}/p", status=400)
    compare(library, f"{ns}/p", f"{ns}/" + "x" * 400, status=400)
    compare(library, f"{ns}/p", f"{ns}/nope", status=404)
    compare(library, f"{ns}/p", f"{ns}/sha256:{'0' * 64}", status=404)
    compare(library, f"{ns}/p", f"{ns}/sha256:zz", status=400)


def test_a_private_artifact_is_compared_only_by_its_readers(library: Library) -> None:
    public, private = library.namespace(), library.namespace(public=False)
    library.publish(public, "p", SHORT)
    library.publish(private, "s", "a b c d secret zebra words", title="Secret")
    params = {"a": f"{public}/p", "b": f"{private}/s"}
    r = library.client.get("/compare", params=params, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/signin?next=")
    sign_in(library.client, library.user())
    page = compare(library, f"{public}/p", f"{private}/s", status=404)
    assert "zebra" not in page and "Secret" not in page
    sign_in(library.client, library.user({private: "read"}))
    page = compare(library, f"{public}/p", f"{private}/s")
    assert "Secret" in page and "zebra" in pres(section(page, "divergence"), "after-b")
    assert "1 leading full block in common" in text_of(section(page, "shared-blocks"))


def test_markup_in_texts_and_titles_is_shown_as_text(library: Library) -> None:
    ns = library.namespace()
    library.publish(ns, "x", "one <script>alert(1)</script>", title="<script>alert(2)</script>")
    library.publish(ns, "y", "two <b>bold</b>", title="<i>it</i>")
    page = compare(library, f"{ns}/x", f"{ns}/y")
    assert "<script>alert" not in page and "<b>bold" not in page and "<i>it" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section(page, "divergence")
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert pres(section(page, "divergence"), "after-b") == "two <b>bold</b>"


def _fill(library: Library, n: int) -> tuple[str, str]:
    ns = library.namespace()
    library.publish(ns, "base", SHORT)
    for i in range(n):
        library.publish(ns, f"x{i}", f"{SHORT} more {i}")
    return f"{ns}/base", f"{ns}/x0"


def test_the_number_of_queries_does_not_grow_with_the_library(library: Library, big_library: Library) -> None:
    counts = []
    for lib, n in ((library, 3), (big_library, 30)):
        a, b = _fill(lib, n)
        with count_queries(lib) as statements:
            page = compare(lib, a, b)
        assert "2 leading full blocks in common" in text_of(section(page, "shared-blocks"))
        counts.append(len(statements))
    assert counts[0] == counts[1], counts


def _answer(page: str) -> str:
    match = re.search(r'<p id="answer" class="answer answer-(\w+)">(.*?)</p>', page, re.S)
    assert match is not None, "the page has no answer sentence"
    assert page.index('id="answer"') < page.index('id="compare"') < page.index('class="side"')
    return f"{match.group(1)}: {html.unescape(match.group(2))}"


def test_the_page_answers_its_question_in_one_sentence_first(library: Library) -> None:
    from kvreg.core.digest import Digest

    ns = library.namespace()
    library.publish(ns, "short", SHORT, title="Short one")
    library.publish(ns, "long", LONG, title="Long one")
    library.publish(ns, "one", "a b c d e f x y z", title="One")
    library.publish(ns, "first", "x b c d e f g h", title="First differs")
    library.publish(ns, "other-tok", LONG, tokenizer_fp=Digest.of_bytes(b"another tokenizer"))
    library.publish(ns, "eight", LONG, block_size=8, tokenizer_fp=Digest.of_bytes(b"another tokenizer"))
    assert _answer(compare(library, f"{ns}/short", f"{ns}/long")) == (
        "yes: Yes: 2 of 2 blocks (8 tokens) reusable; proof checked."
    )
    assert _answer(compare(library, f"{ns}/one", f"{ns}/short")) == (
        "partly: Partly: the first 1 of 2 blocks (4 tokens) are the same KV cache, "
        "but neither artifact is a prefix of the other."
    )
    assert _answer(compare(library, f"{ns}/first", f"{ns}/short")) == (
        "no: No: their first blocks already differ, so no KV block is reusable."
    )
    assert _answer(compare(library, f"{ns}/long", f"{ns}/other-tok")) == (
        "no: No: the tokenizers differ, so no KV block of one can serve the other, whatever their texts."
    )
    assert _answer(compare(library, f"{ns}/long", f"{ns}/eight")) == (
        "no: No: the tokenizers and block sizes differ, so no KV block of one can serve the other, "
        "whatever their texts."
    )
    # No longer four "same" pills before the answer: one badge says whether they can share KV.
    page = compare(library, f"{ns}/short", f"{ns}/long")
    assert section(page, "compatibility").count('class="badge') == 1
