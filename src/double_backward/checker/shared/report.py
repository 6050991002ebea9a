"""What the checker found, and how it is shown: :class:`Problem`, :class:`Report`, text, JSON.

Every problem is a :class:`Problem` carrying its diagnosis and the page that explains the fix;
the checks only decide which problems apply (:mod:`~double_backward.checker.function.evidence`,
:mod:`~double_backward.checker.function.causes`). This module only renders: one verdict line first,
then one line per check, then the notes, then each problem in full.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

DOCS_URL = "https://double-backward.readthedocs.io/en/latest/"
# Printed URLs (never validated against the built site): key -> page under DOCS_URL.
PAGES = {
    "intermediates": "auto_examples/tutorial/plot_03_saving_intermediates.html",
    "untracked": "auto_examples/tutorial/plot_04_untracked_backward.html",
    "modern": "auto_examples/writing/plot_06_modern_api.html",
    "deriving": "auto_examples/writing/plot_07_deriving_double_backward.html",
    "inplace": "auto_examples/writing/plot_10_inplace_and_views.html",
    "surrogate": "auto_examples/writing/plot_12_surrogate_gradients.html",
    "failures": "auto_examples/when_it_breaks/plot_13_failure_gallery.html",
    "builtins": "auto_examples/builtins_and_models/plot_14_builtins_without_double_backward.html",
    "check": "auto_examples/when_it_breaks/plot_16_check_your_function.html",
    "custom-ops": "auto_examples/beyond_python/plot_17_custom_ops.html",
    "cpp": "auto_examples/beyond_python/plot_18_cpp_extension.html",
    "compile": "auto_examples/beyond_python/plot_19_torch_compile.html",
    "compatibility": "compatibility.html",
}
WIDTH = 79  # what fits a terminal and the docs' output blocks


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a Function's double backward, with where to read the fix."""

    name: str
    diagnosis: str
    page: str | None = "failures"

    @property
    def url(self) -> str:
        return DOCS_URL + PAGES[self.page] if self.page else ""

    @property
    def summary(self) -> str:
        """The diagnosis's first sentence: what the verdict line shows."""
        return self.diagnosis.split(". ")[0].split(": ")[0].rstrip(".")

    def __str__(self) -> str:
        text = wrap(f"[{self.name}] {self.diagnosis}", "", "    ")
        fix = f"\n    read: {self.url}" if self.page else ""
        return text + fix

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "diagnosis": self.diagnosis, "url": self.url}


@dataclasses.dataclass
class Report:
    """What ``check`` found: ``problems`` (empty when all is well), ``notes``, every result.

    ``derived_only`` holds failures seen only at a point derived from your inputs, never at
    them: shown, with the point, for you to judge, but they do not decide ``ok``.
    """

    function: str
    results: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    torch_func: dict[str, str] = dataclasses.field(default_factory=dict)
    derived_only: list[Problem] = dataclasses.field(default_factory=list)
    surrogate_gradient: bool = False

    @property
    def ok(self) -> bool:
        """True when no check failed at your inputs."""
        return not self.problems

    @property
    def verdict(self) -> str:
        """The verdict in one line ("supports double backward ...", or the first problem)."""
        if self.problems:
            first = self.problems[0]
            more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            return f"PROBLEM [{first.name}] {first.summary}{more}"
        what = (
            "double backward consistent with the custom backward"
            if self.surrogate_gradient
            else "supports double backward"
        )
        if self.derived_only:
            return f"{what} at your inputs; a check failed at a derived point (below)"
        return f"{what} at the points checked"

    def problem_names(self) -> set[str]:
        """The names of the problems found, e.g. ``{"saved-intermediate"}``."""
        return {problem.name for problem in self.problems}

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (what ``--json`` prints)."""
        return {
            "function": self.function,
            "ok": self.ok,
            "verdict": self.verdict,
            "surrogate_gradient": self.surrogate_gradient,
            "results": dict(self.results),
            "problems": [problem.as_dict() for problem in self.problems],
            "derived_only": [problem.as_dict() for problem in self.derived_only],
            "notes": list(self.notes),
            "torch_func": dict(self.torch_func),
        }

    def __str__(self) -> str:
        return render_text(self)


def render_text(report: Report) -> str:
    """The report for people: the verdict, one line per check, notes, problems in full."""
    lines = [wrap(f"{report.function}: {report.verdict}", "", "  ")]
    lines += [shorten(f"  {name:16} {result}") for name, result in report.results.items()]
    if report.torch_func:
        lines.append(shorten(f"  {'torch.func':16} {_torch_func_line(report)}"))
        if any(result != "works" for result in report.torch_func.values()):
            lines.append(f"    (not required) read: {DOCS_URL + PAGES['compatibility']}")
    lines += [wrap(f"note: {note}", "  ", "    ") for note in report.notes]
    for problem in report.derived_only:
        lines.append("seen only at a point derived from your inputs (judge it yourself):")
        lines.append(str(problem))
    lines += [str(problem) for problem in report.problems]
    return "\n".join(lines)


def _torch_func_line(report: Report) -> str:
    """What works and what does not, on one line (the details are in ``torch_func``)."""
    works = [name.split(" ")[0] for name, r in report.torch_func.items() if r == "works"]
    fails = {name.split(" ")[0]: _reason(r) for name, r in report.torch_func.items()
             if r != "works"}  # fmt: skip
    parts = [f"{', '.join(works)} work"] if works else []
    reasons = set(fails.values())
    if len(reasons) == 1 and fails:
        parts.append(f"{', '.join(fails)}: {next(iter(reasons))}")
    else:
        parts += [f"{name}: {reason}" for name, reason in fails.items()]
    return "; ".join(parts)


def _reason(result: str) -> str:
    """A torch.func failure, short enough for one line (the whole message is in the data)."""
    if "setup_context staticmethod" in result:
        return "not supported (no setup_context)"
    return result


def wrap(text: str, first: str, rest: str) -> str:
    """``text`` wrapped to the width of a terminal."""
    return textwrap.fill(
        text, WIDTH, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


def shorten(line: str) -> str:
    """One line, cut to the width of a terminal (the detail is in the problem below)."""
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."
