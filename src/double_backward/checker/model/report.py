"""What :func:`~double_backward.check_model` found, and how it reads: :class:`ModelReport`,
one :class:`Break` per place double backward breaks."""

from __future__ import annotations

import dataclasses
import textwrap

from ..shared.fixes import BUILTINS_TABLE

#: Where a break was seen (:attr:`Break.seen`).
SEEN_IN_BOTH = "the whole model and the submodule alone"
SEEN_IN_MODEL = "the whole model only (no submodule breaks alone)"


@dataclasses.dataclass(frozen=True)
class Break:
    """Where double backward breaks: ``module`` (dotted path), ``op``, ``kind``, ``message``.

    ``kind`` is ``"raises"`` (the gradient penalty raised ``message``) or ``"silent"`` (no
    error, but the second derivative disagrees with finite differences of the first, by the
    relative error and tolerance the message gives). ``op`` names what was found: the ATen
    operator, the custom Function or the cast. ``fix`` says what to do.
    ``seen`` says whether the break was seen in the whole model and in the submodule alone.
    ``cause``, where the break is at a custom Function, is what
    :func:`~double_backward.check` finds in it on the arguments it got there (``""`` when it
    names nothing).
    """

    module: str
    op: str
    kind: str
    message: str
    fix: str
    seen: str = ""
    cause: str = ""

    def __str__(self) -> str:
        where = self.module or "(the model itself)"
        text = _wrap(f"[{self.kind}] {where}: {self.op}: {self.message}", "", "    ")
        if self.cause:
            text += "\n" + _wrap(f"cause: {self.cause}", "    ", "      ")
        if self.seen:
            text += "\n" + _wrap(f"seen in: {self.seen}", "    ", "      ")
        text += "\n" + _wrap(f"fix: {self.fix}", "    ", "      ")
        if self.op.startswith("aten::"):  # a built-in: the table has its row
            text += f"\n    read: {BUILTINS_TABLE}"
        return text


@dataclasses.dataclass
class ModelReport:
    """What :func:`~double_backward.check_model` found: ``breaks`` (empty when all is well).

    ``penalty`` names the gradient penalty that was run, ``wrt`` the option that chose it
    (the default resolved: ``"parameters"`` when no input is floating point, and ``checked``
    says so); ``checked`` says what was compared,
    ``skipped`` what was not differentiated. ``undecided`` is set (why, and what to try) when
    no break was seen but finite differences could not decide at these inputs: that is not a
    pass, and :attr:`ok` is False.
    """

    model: str
    checked: list[str] = dataclasses.field(default_factory=list)
    breaks: list[Break] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    penalty: str = ""
    undecided: str = ""
    wrt: str = ""

    @property
    def ok(self) -> bool:
        """True when no break was found and every comparison decided."""
        return not self.breaks and not self.undecided

    def __str__(self) -> str:
        if self.breaks:
            count = len(self.breaks)
            verdict = f"{count} break{'s' if count > 1 else ''} of double backward."
        elif self.undecided:
            verdict = "could not decide at these inputs (not a pass)."
        else:
            verdict = "ok, double backward works at the point checked."
        lines = [f"{self.model}: {verdict}"]
        lines += [textwrap.indent(str(found), "  ") for found in self.breaks]
        if self.undecided:
            lines.append(_wrap(f"undecided: {self.undecided}", "  ", "    "))
        if self.penalty:
            lines.append(_wrap(f"penalty: {self.penalty}", "  ", "    "))
        lines += [_wrap(f"checked: {item}", "  ", "    ") for item in self.checked]
        lines += [_wrap(f"skipped: {item}", "  ", "    ") for item in self.skipped]
        return "\n".join(lines)


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(
        text, 79, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


__all__ = ["SEEN_IN_BOTH", "SEEN_IN_MODEL", "Break", "ModelReport"]
