"""A namespace's description: written by its admin in the browser (preview, save), shown rendered
from Markdown on the namespace page with nothing of its markup run; the glossary's anchors."""

from __future__ import annotations

import uuid
from typing import Any

from .helpers import clean, no_horizontal_scroll, sign_in, text, visit
from .seed import Seeded

DESCRIPTION = (
    "Verified **GSM8K** solutions of the flywheel.\n\n"
    "- checked by `gsm8k-exact-answer`\n"
    "- see [the data set](https://example.org/gsm8k)\n\n"
    "<script>alert(1)</script> [x](javascript:alert(2)) <img src=x onerror=alert(3)>"
)


def _namespace(page: Any, server: Seeded) -> str:
    name = f"described-{uuid.uuid4().hex[:8]}"
    r = page.request.post(
        "/api/v1/namespaces",
        data={"name": name, "public": True},
        headers={"Authorization": f"Bearer {server.admin_token}"},
    )
    assert r.status == 201, r.text()
    return name


def test_an_admin_writes_a_description_and_it_is_rendered_safely(
    page: Any, server: Seeded, shot: Any
) -> None:
    ns = _namespace(page, server)
    sign_in(page, server.admin_token)
    visit(page, f"/ns/{ns}")
    with page.expect_navigation():
        page.click("#description-edit")
    page.fill("#description-text", DESCRIPTION)
    with page.expect_navigation():
        page.click("#description-preview")
    assert "Preview (not saved)" in text(page, "#description-rendered")
    assert page.locator("#description-rendered strong", has_text="GSM8K").count() == 1
    assert page.input_value("#description-text") == DESCRIPTION  # the draft is kept
    with page.expect_navigation():
        page.click("#description-save")
    assert page.url.endswith(f"/ns/{ns}#description"), page.url
    shown = page.locator("#description-text")
    assert shown.locator("strong", has_text="GSM8K").count() == 1
    assert shown.locator("li").count() == 2
    link = shown.locator("a", has_text="the data set")
    assert link.get_attribute("href") == "https://example.org/gsm8k"
    assert link.get_attribute("rel") == "nofollow noopener noreferrer"
    page.wait_for_timeout(300)  # an injected script or onerror would have run by now
    assert shown.locator("script, img, [onerror]").count() == 0
    assert "<script>alert(1)</script>" in (shown.text_content() or "")
    assert shown.locator('a[href^="javascript"]').count() == 0
    assert "edited by root" in text(page, "#description-edited")
    clean(page)


def test_the_description_form_and_the_glossary_fit_a_phone(phone: Any, server: Seeded) -> None:
    ns = _namespace(phone, server)
    sign_in(phone, server.admin_token)
    visit(phone, f"/ns/{ns}/description")
    no_horizontal_scroll(phone)
    visit(phone, "/glossary#leaf-hash")
    no_horizontal_scroll(phone)
    assert phone.locator("dt#leaf-hash").is_visible()
    assert phone.evaluate("document.querySelector('dt#leaf-hash').getBoundingClientRect().top") < 844
    clean(phone)
