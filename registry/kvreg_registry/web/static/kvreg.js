// kvreg web UI: the only script. Adds "Copy" buttons next to elements marked
// data-copy (the pull command); everything else works without JavaScript.
document.addEventListener("DOMContentLoaded", () => {
  for (const el of document.querySelectorAll("[data-copy]")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = "Copy";
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
