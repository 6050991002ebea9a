"""Locating a break: each submodule checked alone on its recorded arguments, and what is
found there named (the ATen op an error names, the custom Function, the cast). Spectral
norm's power iteration is held during the check (``calls.HeldPowerIterations``), so it is
never a break."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from ..function.causes import custom_nodes, is_once_differentiable
from ..shared.fixes import FAILURES_PAGE, HIGHER_ORDERS_PAGE, fix_for, fix_for_message
from .calls import Call
from .functions import diagnose
from .penalty import NotDifferentiable, Outcome, Target, check
from .report import SEEN_IN_BOTH, SEEN_IN_MODEL, Break

_ATEN_IN_MESSAGE = re.compile(r"aten::(\w+)|derivative for '(\w+)'")


def innermost(failing: list[str]) -> list[str]:
    """The failing submodules none of whose own submodules fail."""
    return [
        name for name in failing
        if not any(other != name and (name == "" or other.startswith(name + "."))
                   for other in failing)
    ]  # fmt: skip


def locate(
    calls: list[Call],
    whole: Outcome,
    target: Target,
    make: Any,
    second: bool,
    dtype: torch.dtype,
) -> list[Break]:
    """Check each recorded submodule on its own arguments; name the innermost that break.

    ``make(module, args, kwargs)`` builds a submodule's :class:`Target`.
    """
    failing: dict[str, tuple[Outcome, Target, nn.Module]] = {}
    for name, module, args, kwargs in calls:
        if name in failing or name == "":
            continue
        sub = make(module, args, kwargs)
        if not sub.second or not sub.first:
            continue
        try:
            outcome = check(sub, second=second, dtype=dtype)
        except NotDifferentiable:
            continue
        if outcome.kind in ("raises", "silent"):
            failing[name] = (outcome, sub, module)
    if not failing:
        root = target.fn if isinstance(target.fn, nn.Module) else None
        return [name_break("", whole, target, root, SEEN_IN_MODEL)]
    return [
        name_break(
            name, failing[name][0], failing[name][1], failing[name][2], SEEN_IN_BOTH
        )
        for name in innermost(list(failing))
    ]


def name_break(
    name: str, outcome: Outcome, target: Target, module: nn.Module | None, seen: str
) -> Break:
    """The op that breaks, and its fix: the error's ATen op, or what the module's graph and
    structure show."""
    kind, message = outcome.kind or "", outcome.message
    match = _ATEN_IN_MESSAGE.search(message)
    if match:
        op = "aten::" + (match.group(1) or match.group(2)).removesuffix("_backward")
        return Break(name, op, kind, message, fix_for(op, module), seen)
    by_message = fix_for_message(message)
    if by_message is not None:
        return Break(name, by_message[0], kind, message, by_message[1], seen)
    try:
        outputs = target.outputs()
    except NotDifferentiable:
        outputs = []
    functions = custom_nodes(outputs)
    once = [node for node in functions if is_once_differentiable(node)]
    if once:
        op = once[0]._forward_cls.__name__  # the custom Function
        fix = ("its backward is `@once_differentiable`: write it with differentiable ops "
               f"(read: {HIGHER_ORDERS_PAGE})")  # fmt: skip
        return Break(name, op, kind, message, fix, seen)
    if functions:
        # What check() finds in each, on the arguments it got in this very call.
        found = diagnose([node._forward_cls for node in functions], target.outputs,
                         target.device)  # fmt: skip
        if found is not None:
            return Break(name, found.function.__name__, kind, message, found.fix, seen,
                         found.cause)  # fmt: skip
        op = functions[0]._forward_cls.__name__
        fix = f"check it with double_backward.check (read: {FAILURES_PAGE})"
        return Break(name, op, kind, message, fix, seen)
    what = type(module).__name__ if module is not None else "the callable"
    op = f"{what}'s second derivative"
    fix = (
        "no custom Function or cast was found in it: an op whose backward "
        "is computed outside autograd (an in-place edit of a saved tensor, a .detach(), a "
        "NumPy step); find it with double_backward.check on the forward's pieces "
        f"(read: {FAILURES_PAGE})"
    )
    if kind == "raises":
        fix = (
            "the error names no ATen op: read its message (a backward that frees what it "
            f"saved, or a graph used twice) and {FAILURES_PAGE}"
        )
    return Break(name, op, kind, message, fix, seen)


__all__ = ["innermost", "locate", "name_break"]
