"""A WCAG 2 contrast check run in the page (``page.evaluate(CHECK)``), for the browser suite.

For every visible element with text of its own (a text node child, or an SVG ``<text>``), it
takes the computed text colour (``fill`` for SVG text), blends it and every translucent
background on the way up the tree onto the first opaque one, and computes the contrast ratio
(WCAG 2.x relative luminance). It returns the elements below 4.5:1, or below 3:1 for large
text (24 px, or 18.66 px bold): ``[{"text", "tag", "ratio", "color", "background", "need"}]``.
Text that is not rendered (closed ``<details>``, ``display: none``, off-screen skip links)
is left out; form fields' values and placeholders are not checked.
"""

from __future__ import annotations

CHECK = r"""
() => {
  const parse = (c) => {
    const m = /rgba?\(([^)]+)\)/.exec(c || "");
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const blend = (top, under) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat([1]);
  };
  const channel = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  const lum = (c) => 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2]);
  const ratio = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  const canvas = parse(getComputedStyle(document.documentElement).backgroundColor);
  const background = (el) => {
    const layers = [];
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let base = matchMedia("(prefers-color-scheme: dark)").matches ? [0, 0, 0, 1] : [255, 255, 255, 1];
    if (canvas && canvas[3] >= 1) base = canvas;
    for (const layer of layers.reverse()) base = blend(layer, base);
    return base;
  };
  const out = [];
  for (const el of document.querySelectorAll("body *")) {
    const svgText = el instanceof SVGTextElement;
    if (el instanceof SVGElement && !svgText) continue;
    if (["SCRIPT", "STYLE", "OPTION", "INPUT", "TEXTAREA", "SELECT"].includes(el.tagName)) continue;
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    if (!el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) continue;
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0 || box.right <= 0 || box.bottom <= 0) continue;
    const st = getComputedStyle(el);
    const bg = background(el);
    const fg = parse(svgText ? st.fill : st.color);
    if (!fg) continue;
    const r = ratio(blend(fg, bg), bg);
    const size = parseFloat(st.fontSize);
    const large = size >= 24 || (parseInt(st.fontWeight, 10) >= 700 && size >= 18.66);
    const need = large ? 3 : 4.5;
    if (r < need - 0.005) {
      out.push({
        text: el.textContent.trim().slice(0, 40),
        tag: el.tagName.toLowerCase() + (el.className ? "." + el.className : ""),
        ratio: Math.round(r * 100) / 100,
        color: st.color,
        background: "rgb(" + bg.slice(0, 3).map(Math.round).join(",") + ")",
        need,
      });
    }
  }
  return out;
}
"""
