// A code block, a display formula or a table that scrolls sideways must be reachable by keyboard
// (WCAG 2.1.1): each gets a tab stop.
document.addEventListener("DOMContentLoaded", () => {
  for (const region of document.querySelectorAll(
    "pre:not([tabindex]), .math-wrapper:not([tabindex]), .table-wrapper:not([tabindex])",
  )) {
    region.setAttribute("tabindex", "0");
  }
});
