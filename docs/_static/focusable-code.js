// A code block that scrolls sideways must be reachable by keyboard (WCAG 2.1.1).
document.addEventListener("DOMContentLoaded", () => {
  for (const pre of document.querySelectorAll("pre:not([tabindex])")) {
    pre.setAttribute("tabindex", "0");
  }
});
