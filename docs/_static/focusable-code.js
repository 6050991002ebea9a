// A code block or a display formula that scrolls sideways must be reachable by keyboard
// (WCAG 2.1.1): each gets a tab stop.
document.addEventListener("DOMContentLoaded", () => {
  for (const region of document.querySelectorAll(
    "pre:not([tabindex]), .math-wrapper:not([tabindex])",
  )) {
    region.setAttribute("tabindex", "0");
  }
});
