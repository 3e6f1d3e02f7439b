// kvreg web UI: the only script. Everything works without it; it adds
// - the phone menu: under 720px the header's links fold behind its "Menu" button (the
//   stylesheet hides them only once this script has marked the page with class "js");
// - "Copy" buttons next to elements marked data-copy (commands, digests).
document.documentElement.classList.add("js");
document.addEventListener("DOMContentLoaded", () => {
  const header = document.querySelector("header.top");
  const toggle = header && header.querySelector("button.menu-toggle");
  if (toggle) {
    toggle.addEventListener("click", () => {
      const open = header.classList.toggle("open");
      toggle.setAttribute("aria-expanded", String(open));
    });
  }
  // Filters and the like: folded on a phone, open on a wider screen.
  if (matchMedia("(min-width: 721px)").matches) {
    for (const d of document.querySelectorAll("details[data-open-wide]")) d.open = true;
  }
  for (const el of document.querySelectorAll("[data-copy]")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary copy";
    button.textContent = "Copy";
    if (el.classList.contains("visually-hidden")) button.setAttribute("aria-label", "Copy " + el.textContent.trim());
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(el.textContent.trim());
        button.textContent = "Copied";
      } catch (err) {
        const range = document.createRange();
        range.selectNodeContents(el);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        button.textContent = "Selected: press Ctrl+C";
      }
    });
    el.after(button);
  }
});
