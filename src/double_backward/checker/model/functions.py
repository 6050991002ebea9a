"""What :func:`~double_backward.check` finds in a custom Function that
:func:`~double_backward.check_model` located a break at: the Function's ``apply`` is watched
while the located call runs again, and ``check`` runs on the arguments it was given there.

The cause it names (an in-place edit of the incoming gradient, a backward computed outside
autograd, a saved intermediate) is what the model's break is reported with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..function.api import check
from ..function.calling import differentiable
from ..shared.report import Problem
from .calls import map_tensors

#: How many distinct custom Functions of one break are checked (each check runs the
#: Function a few times on its recorded arguments, bounded by ``check``'s own scaling).
MAX_FUNCTIONS = 4
#: What ``check`` reports when it could not name a cause: the fallback text stays.
_NO_CAUSE = frozenset(
    {"undecided", "function-raised", "no-differentiable-output", "unsupported-dtype",
     "non-finite"}
)
# Where check saw it (its own copies of the inputs): left out.
_SEEN = re.compile(r"\s*Seen(?: at|:) .*\Z", re.DOTALL)
# A sentence's end: not the dot of "e.g." or "i.e.".
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s")


@dataclasses.dataclass(frozen=True)
class Found:
    """``check``'s first problem in ``function`` on the arguments it got at the break."""

    function: type
    problem: Problem

    @property
    def cause(self) -> str:
        """``custom Function Name: summary [problem]``: what the break is reported with."""
        first = _SENTENCE_END.split(self.problem.diagnosis, maxsplit=1)[0]
        summary = first.split(": ")[0].rstrip(".")  # what, before the tensors it names
        name = self.function.__name__
        return f"custom Function {name}: {summary} [{self.problem.name}]"

    @property
    def fix(self) -> str:
        """The diagnosis, without where ``check`` saw it (its own copies of the inputs)."""
        diagnosis = _SEEN.sub("", self.problem.diagnosis).rstrip()
        read = f" (read: {self.problem.url})" if self.problem.url else ""
        return (
            f"double_backward.check({self.function.__name__}.apply, ...) on the arguments it "
            f"gets here finds: {diagnosis}{read}"
        )


@contextlib.contextmanager
def _watching(functions: Sequence[type]) -> Iterator[dict[type, tuple[tuple, dict]]]:
    """Each Function's first call's arguments while the block runs; ``apply`` put back exactly
    afterwards (also on error). Patched on the class: not thread-safe, as ``check``."""
    recorded: dict[type, tuple[tuple, dict]] = {}
    saved = []
    try:
        for cls in functions:
            own = cls.__dict__.get("apply", _ABSENT)

            def apply(klass: type, *args: Any, _cls: type = cls, _own: Any = own,
                      **kwargs: Any) -> Any:  # fmt: skip
                if klass is _cls and _cls not in recorded:
                    recorded[_cls] = (args, kwargs)
                # The apply the class had, bound to the class called: its own, else the one
                # it inherits (a classmethod in torch 2.13, a built-in in 2.14: no __func__).
                if _own is not _ABSENT:
                    return _own.__get__(None, klass)(*args, **kwargs)
                return super(_cls, klass).apply(*args, **kwargs)

            saved.append((cls, own))
            cls.apply = classmethod(apply)  # type: ignore[method-assign,assignment]
        yield recorded
    finally:
        for cls, own in reversed(saved):
            if own is _ABSENT:
                del cls.apply
            else:
                cls.apply = own  # type: ignore[method-assign]


_ABSENT = object()


def _inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict, list[int | str]]:
    """Detached copies of the arguments, and which of them the model differentiated (the
    floating tensors that required grad there)."""
    used = lambda v: differentiable(v) and v.requires_grad  # noqa: E731
    wrt: list[int | str] = [i for i, a in enumerate(args) if used(a)]
    wrt += [k for k, v in kwargs.items() if used(v)]
    copy = lambda t: t.detach().clone()  # noqa: E731
    return tuple(map_tensors(list(args), copy)), map_tensors(kwargs, copy), wrt


def diagnose(functions: Sequence[type], call: Any, device: torch.device
             ) -> Found | None:  # fmt: skip
    """Run ``call()`` (the located call again) watching ``functions``, then ``check`` each on
    its recorded arguments; the first that names a cause, or None."""
    functions = list(dict.fromkeys(functions))[:MAX_FUNCTIONS]
    try:
        with _watching(functions) as recorded:
            call()
    except Exception:  # noqa: BLE001 - the call ran before: nothing recorded, nothing named
        return None
    for cls in functions:
        if cls not in recorded:
            continue  # called another way (super().apply, a wrapper): not seen here
        args, kwargs, wrt = _inputs(*recorded[cls])
        if not wrt:
            continue
        devices = [device] if device.type == "cuda" else []
        try:  # check draws from its own generator; the user's random stream is kept too
            with torch.random.fork_rng(devices=devices):
                report = check(cls.apply, *args, kwargs=kwargs, wrt=wrt)
        except Exception:  # noqa: BLE001 - check could not run it: the fallback text stays
            continue
        problems = [p for p in report.problems if p.name not in _NO_CAUSE]
        if problems:
            return Found(cls, problems[0])
    return None


__all__ = ["MAX_FUNCTIONS", "Found", "diagnose"]
