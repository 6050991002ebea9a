"""Check a custom Function for double-backward support, and say what is wrong in plain words.

>>> from double_backward import check, Square
>>> report = check(Square.apply, torch.randn(3, 3))
>>> report.ok
True

From the command line, on any importable Function or function::

    python -m double_backward.checker double_backward:SinhBad --shape 3,3

**The verdict comes from evidence.** A problem is reported only when something was seen to
fail, at two or more points (your inputs, then points mixed from their values):

1. calling the Function (an error it raises is reported as that, with its message; NaN or inf
   in the outputs is said plainly);
2. :func:`~torch.autograd.gradcheck`: the first derivative against finite differences;
3. :func:`~torch.autograd.gradgradcheck`, whose incoming gradient requires grad, as in a
   gradient penalty: the second derivative against finite differences of the first, or double
   backward raising;
4. forward-over-reverse against reverse-over-reverse Hessian-vector products (when the
   Function has a ``jvp``);
5. optionally (``third_order=True``), the third derivative.

**Structure explains, it does not accuse.** When a check fails, the checker looks at the
autograd graph (tensors saved without history, tensors kept on ``ctx``, outputs marked
non-differentiable, ``@once_differentiable``, ``out=`` ops, a gradient with no graph back to
its input) to name the *cause*, naming each tensor. A suspicious pattern that did not fail is a
note. Integer and bool tensors never count: they cannot carry gradients. A first derivative
with no graph back to its input, while every check passes, means the second derivative is zero
(a linear or piecewise-linear Function): an answer, not a problem.

:mod:`torch.func` support (``vmap``, ``vjp``, ``jvp``, Hessian-vector products) is reported,
never required.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck

from .graph_walks import reaches

DOCS_URL = "https://double-backward.readthedocs.io/en/latest/"
PAGES = {
    "intermediates": "auto_examples/plot_03_saving_intermediates.html",
    "untracked": "auto_examples/plot_04_untracked_backward.html",
    "modern": "auto_examples/plot_06_modern_api.html",
    "failures": "auto_examples/plot_13_failure_gallery.html",
    "check": "auto_examples/plot_16_check_your_function.html",
    "custom-ops": "auto_examples/plot_17_custom_ops.html",
    "cpp": "auto_examples/plot_18_cpp_extension.html",
    "compile": "auto_examples/plot_19_torch_compile.html",
    "compatibility": "compatibility.html",
}

# Above this many elements (all differentiated inputs together), gradcheck runs in fast mode:
# one random projection of the Jacobian instead of all of it, so the cost grows linearly.
# Full mode costs a few calls per element: about a second at 100 elements.
FAST_MODE_ABOVE = 100
# Tolerances of gradcheck per dtype: float32's finite differences need a larger step.
TOLERANCES = {
    torch.float64: {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3},
    torch.float32: {"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2},
    torch.float16: {"eps": 1e-2, "atol": 1e-1, "rtol": 1e-1},
    torch.bfloat16: {"eps": 1e-2, "atol": 1e-1, "rtol": 1e-1},
}
_ONCE_DIFFERENTIABLE_MESSAGE = "marked with @once_differentiable"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a Function's double backward, with where to read the fix."""

    name: str
    diagnosis: str
    page: str | None = "failures"

    @property
    def url(self) -> str:
        return DOCS_URL + PAGES[self.page] if self.page else ""

    def __str__(self) -> str:
        text = _wrap(f"[{self.name}] {self.diagnosis}", "", "    ")
        fix = f"\n    read: {self.url}" if self.page else ""
        return text + fix

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "diagnosis": self.diagnosis, "url": self.url}


@dataclasses.dataclass
class Report:
    """What ``check`` found: ``problems`` (empty when all is well), ``notes``, every result."""

    function: str
    results: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    torch_func: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.problems

    def problem_names(self) -> set[str]:
        """The names of the problems found, e.g. ``{"saved-intermediate"}``."""
        return {problem.name for problem in self.problems}

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (what ``--json`` prints)."""
        return {
            "function": self.function,
            "ok": self.ok,
            "results": dict(self.results),
            "problems": [problem.as_dict() for problem in self.problems],
            "notes": list(self.notes),
            "torch_func": dict(self.torch_func),
        }

    def __str__(self) -> str:
        lines = [f"double-backward check of {self.function}:"]
        lines += [
            _wrap(f"{name:30} {result}", "  ", " " * 33)
            for name, result in self.results.items()
        ]
        if self.torch_func:
            lines.append("  torch.func support (reported, not required):")
            if (
                len(set(self.torch_func.values())) == 1
            ):  # one reason for all: say it once
                names = ", ".join(self.torch_func)
                value = next(iter(self.torch_func.values()))
                lines.append(_wrap(f"{names}: {value}", "    ", "      "))
            else:
                lines += [
                    _wrap(f"{name:26} {result}", "    ", " " * 31)
                    for name, result in self.torch_func.items()
                ]
            lines.append(f"    read: {DOCS_URL + PAGES['compatibility']}")
        lines += [_wrap(f"note: {note}", "  ", "    ") for note in self.notes]
        if self.ok:
            lines.append(
                "No problem found: double backward works at the points checked."
            )
        else:
            lines.append(f"{len(self.problems)} problem(s):")
            lines += [str(problem) for problem in self.problems]
        return "\n".join(lines)


# -- small helpers -------------------------------------------------------------


def _wrap(text: str, first: str, rest: str) -> str:
    """``text`` wrapped to 79 columns (what fits a terminal and the docs' output blocks)."""
    return textwrap.fill(
        text, 79, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


def _message(error: BaseException, limit: int = 300) -> str:
    """The error's type and its message (first lines), enough to recognise and search it."""
    text = str(error).strip()
    if isinstance(
        error, GradcheckError
    ):  # keep the sentence, not the Jacobians it prints
        text = text.split(",\nnumerical")[0].split("\n")[0]
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _short(error: BaseException) -> str:
    """The first sentence of the error, without torch's list of transforms."""
    text = _message(error, 400).replace(" (vmap, grad, jvp, jacrev, ...)", "")
    return text.split(". ")[0]


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}, shape {tuple(tensor.shape)}"


def _is_float(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _flatten(value: object) -> list[object]:
    """The leaves of nested tuples and lists (a Function's outputs)."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def _kind(value: object) -> str:
    if isinstance(value, torch.Tensor):
        what = f"{str(value.dtype).removeprefix('torch.')} tensor"
    elif isinstance(value, np.ndarray):
        what = "NumPy array"
    else:
        what = type(value).__name__
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def _quietly(compute: Callable[[], Any]) -> Any:
    """Run ``compute`` without torch's warnings about precision and deprecated internals."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compute()


@dataclasses.dataclass
class _Call:
    """How to call ``fn`` with the differentiated inputs put back among the other arguments."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    slots: list[int | str]  # positions and keyword names of the differentiated inputs
    kept: list[int] = dataclasses.field(default_factory=list)  # checked output leaves
    # (data_ptr, shape) of every tensor a Function marked non-differentiable in the last call
    marked: list[tuple[int, torch.Size]] = dataclasses.field(default_factory=list)

    def label(self, slot: int | str) -> str:
        return f"argument {slot}" if isinstance(slot, int) else f"keyword '{slot}'"

    def outputs(self, *inputs: torch.Tensor) -> list[object]:
        args, kwargs = list(self.args), dict(self.kwargs)
        for slot, value in zip(self.slots, inputs, strict=True):
            # A clone: the caller's tensors are never modified in place (mark_dirty), and
            # the differentiated inputs stay leaves.
            if isinstance(slot, int):
                args[slot] = value.clone()
            else:
                kwargs[slot] = value.clone()
        return _flatten(self.fn(*args, **kwargs))

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = self.outputs(*inputs)
        return tuple(leaves[i] for i in self.kept)

    def scalar(self, weights: Sequence[torch.Tensor]) -> Callable[..., torch.Tensor]:
        """A fixed random weighted sum of the outputs: one scalar to differentiate twice."""

        def weighted(*inputs: torch.Tensor) -> torch.Tensor:
            outputs = self(*inputs)
            return sum((out * w).sum() for out, w in zip(outputs, weights, strict=True))

        return weighted


def _function_name(fn: Callable[..., Any]) -> str:
    owner = getattr(fn, "__self__", None)  # the Function class, for SomeFunction.apply
    if isinstance(owner, type):
        return f"{owner.__name__}.apply"
    return getattr(fn, "__qualname__", None) or repr(fn)


def _slots(
    args: tuple[Any, ...], kwargs: dict[str, Any], wrt: Sequence[int | str] | None
) -> list[int | str]:
    floating = [i for i, a in enumerate(args) if _is_float(a)]
    floating += [k for k, v in kwargs.items() if _is_float(v)]
    if wrt is None:
        if not floating:
            raise TypeError(
                "check: no floating-point tensor among the arguments, nothing to "
                "differentiate; pass example inputs after 'fn', e.g. "
                "check(MyFunction.apply, torch.randn(3))"
            )
        return floating
    wrt = (wrt,) if isinstance(wrt, (int, str)) else tuple(wrt)
    for slot in wrt:
        value = args[slot] if isinstance(slot, int) and -len(args) <= slot < len(args) else (
            kwargs.get(slot) if isinstance(slot, str) else None
        )  # fmt: skip
        if not _is_float(value):
            raise TypeError(
                f"check: wrt={slot!r} must name a floating-point tensor argument "
                f"(a position or a keyword), got {_kind(value)}"
            )
    return [slot % len(args) if isinstance(slot, int) else slot for slot in wrt]


def _other_point(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A new point in the convex hull of ``x``'s values: mixed with a shuffled copy.

    Every value stays between the smallest and largest of ``x``, so a domain that an interval
    describes (positive inputs, a range) is kept.
    """
    flat = x.reshape(-1)
    shuffled = flat[torch.randperm(flat.numel(), generator=generator)]
    mix = torch.rand(flat.shape, generator=generator, dtype=x.dtype) * 0.6 + 0.2
    return (mix * flat + (1 - mix) * shuffled).reshape(x.shape)


# -- the graph: what the Function saved, kept on ctx, or marked -----------------------


def _custom_nodes(tensors: Sequence[torch.Tensor]) -> list[Any]:
    """The custom Function nodes (their ``ctx``) in the graphs of ``tensors``."""
    stack = [t.grad_fn for t in tensors if isinstance(t, torch.Tensor)]
    seen: set[Any] = set()
    found = []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            found.append(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


def _is_once_differentiable(node: Any) -> bool:
    backward = getattr(getattr(node, "_forward_cls", None), "backward", None)
    code = getattr(backward, "__code__", None)
    return (
        hasattr(backward, "__wrapped__")
        and code is not None
        and code.co_filename == torch.autograd.function.__file__
    )


@dataclasses.dataclass
class _Structure:
    """What the graph shows; each entry names a tensor (where, dtype, shape)."""

    stashed: list[str] = dataclasses.field(default_factory=list)
    saved_intermediates: list[str] = dataclasses.field(default_factory=list)
    saved_non_differentiable_outputs: list[str] = dataclasses.field(
        default_factory=list
    )
    once_differentiable: list[str] = dataclasses.field(default_factory=list)
    multi_output: list[str] = dataclasses.field(default_factory=list)
    not_reaching: list[str] = dataclasses.field(default_factory=list)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype


def _structure(
    call: _Call, inputs: tuple[torch.Tensor, ...], outputs: list[object]
) -> _Structure:
    found = _Structure()
    checked = [outputs[i] for i in call.kept]
    for node in _custom_nodes(checked):
        name = getattr(node, "_forward_cls", type(node)).__name__
        if _is_once_differentiable(node):
            found.once_differentiable.append(f"{name}.backward")
        for attribute, value in sorted(vars(node).items()):
            if _is_float(value) and not value.requires_grad:
                found.stashed.append(f"ctx.{attribute} in {name} ({_describe(value)})")
        try:
            saved = node.saved_tensors
        except RuntimeError:  # already freed, or unpack refused: nothing to name
            saved = ()
        tensor_outputs = [o for o in outputs if isinstance(o, torch.Tensor)]
        for index, tensor in enumerate(saved):
            if not _is_float(tensor) or tensor.requires_grad:
                continue  # integers never need history; a tensor with history is fine
            where = f"saved tensor #{index} of {name} ({_describe(tensor)})"
            marked = (tensor.data_ptr(), tensor.shape) in call.marked
            if marked or any(_same(tensor, out) for out in tensor_outputs):
                found.saved_non_differentiable_outputs.append(where)
            elif not any(_same(tensor, x) for x in inputs):
                # Not an input we differentiate; an argument the caller left out of wrt is
                # a constant and may be saved as it is.
                constants = [
                    a for a in (*call.args, *call.kwargs.values()) if _is_float(a)
                ]
                if not any(_same(tensor, c) for c in constants):
                    found.saved_intermediates.append(where)
        # One metadata entry per output of forward, even those a wrapper drops.
        count = len(getattr(node, "_input_metadata", ()))
        if count > 1:
            found.multi_output.append(f"{name} ({count} outputs)")
    return found


# -- the checks -----------------------------------------------------------------


class _Failed(Exception):
    """A check failed: ``kind`` is "mismatch" (GradcheckError) or "raised"."""

    def __init__(self, kind: str, error: BaseException):
        super().__init__(_message(error))
        self.kind = kind
        self.error = error


def _run_check(compute: Callable[[], object]) -> None:
    try:
        _quietly(compute)
    except GradcheckError as error:
        raise _Failed("mismatch", error) from error
    except Exception as error:  # noqa: BLE001 - anything the Function raises is reported
        raise _Failed("raised", error) from error


def _hvp_agreement(
    call: _Call,
    inputs: tuple[torch.Tensor, ...],
    weights: list[torch.Tensor],
    tol: dict,
) -> str:
    """Forward-over-reverse against reverse-over-reverse Hessian-vector products."""
    scalar = call.scalar(weights)
    vectors = tuple(torch.randn_like(x) for x in inputs)
    detached = tuple(x.detach() for x in inputs)
    try:
        gradient = torch.func.grad(scalar, argnums=tuple(range(len(inputs))))
        forward = _quietly(lambda: torch.func.jvp(gradient, detached, vectors)[1])
    except Exception as error:  # noqa: BLE001
        return f"skipped (no forward mode: {_short(error)})"
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    grads = torch.autograd.grad(
        scalar(*leaves),
        leaves,
        create_graph=True,
        allow_unused=True,
        materialize_grads=True,
    )
    dot = sum((g * v).sum() for g, v in zip(grads, vectors, strict=True))
    if not dot.requires_grad:
        reverse = tuple(torch.zeros_like(x) for x in inputs)
    else:
        reverse = torch.autograd.grad(
            dot, leaves, allow_unused=True, materialize_grads=True
        )
    agree = all(
        torch.allclose(f, r, rtol=tol["rtol"], atol=tol["atol"])
        for f, r in zip(forward, reverse, strict=True)
    )
    return "agree" if agree else "DISAGREE"


def _jvp_agreement(
    call: _Call,
    inputs: tuple[torch.Tensor, ...],
    weights: list[torch.Tensor],
    tol: dict,
) -> str:
    """The first derivative by forward mode (the jvp staticmethod) against reverse mode:
    wᵀ(J t) from a jvp against (wᵀJ) t from backward, for random w and t."""
    detached = tuple(x.detach() for x in inputs)
    tangents = tuple(torch.randn_like(x) for x in inputs)
    try:
        _, jvps = _quietly(lambda: torch.func.jvp(call, detached, tangents))
    except Exception as error:  # noqa: BLE001
        return f"skipped (no forward mode: {_short(error)})"
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    grads = torch.autograd.grad(
        call(*leaves), leaves, weights, allow_unused=True, materialize_grads=True
    )
    forward = sum((w * j).sum() for w, j in zip(weights, jvps, strict=True))
    reverse = sum((g * t).sum() for g, t in zip(grads, tangents, strict=True))
    scale = 1 + float(reverse.abs())
    agree = abs(float(forward - reverse)) <= tol["atol"] * scale + tol["rtol"] * scale
    return "agree" if agree else "DISAGREE"


def _first_derivative(call: _Call, weights: list[torch.Tensor]) -> Callable[..., Any]:
    scalar = call.scalar(weights)

    def first(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grads = torch.autograd.grad(
            scalar(*inputs), inputs, create_graph=True, allow_unused=True,
            materialize_grads=True,
        )  # fmt: skip
        # A gradient with no graph is constant: its derivatives are zero, nothing to check.
        return tuple(g for g in grads if g.requires_grad)

    return first


def _torch_func_support(
    call: _Call, inputs: tuple[torch.Tensor, ...], weights: list[torch.Tensor]
) -> dict[str, str]:
    """Which torch.func transforms work (each linear in the input size)."""
    detached = tuple(x.detach() for x in inputs)
    scalar = call.scalar(weights)
    argnums = tuple(range(len(inputs)))
    tangents = tuple(torch.randn_like(x) for x in inputs)
    probes: dict[str, Callable[[], object]] = {
        "vmap": lambda: torch.func.vmap(call)(
            *(x.unsqueeze(0).expand(2, *x.shape) for x in detached)
        ),
        "vjp (reverse mode)": lambda: torch.func.grad(scalar, argnums)(*detached),
        "jvp (forward mode)": lambda: torch.func.jvp(call, detached, tangents),
        "Hessian-vector product": lambda: torch.func.jvp(
            torch.func.grad(scalar, argnums), detached, tangents
        ),
    }
    results = {}
    for name, probe in probes.items():
        try:
            _quietly(probe)
        except Exception as error:  # noqa: BLE001
            results[name] = f"not supported ({_short(error)})"
        else:
            results[name] = "works"
    return results


# -- naming the cause of an observed failure ------------------------------------


def _cause_of_second_order_failure(
    failure: _Failed, found: _Structure, where: str
) -> Problem:
    seen = f"{where}: {failure}"
    text = str(failure.error)
    if _ONCE_DIFFERENTIABLE_MESSAGE in text or found.once_differentiable:
        names = ", ".join(found.once_differentiable) or "a backward"
        return Problem("once-differentiable", (
            f"double backward fails: {names} is marked @once_differentiable, so the Function "
            "declares itself first-order only. Write backward with differentiable operations "
            f"(or a Function of its own) and remove the decorator. Seen: {seen}"
        ))  # fmt: skip
    if "out=" in text:
        return Problem("out-in-backward", (
            "double backward raises: backward writes with an out= operation, which autograd "
            "cannot record. Use the operation's ordinary form (torch.mul(a, b), not "
            f"torch.mul(a, b, out=buf)). Seen: {seen}"
        ))  # fmt: skip
    if found.stashed:
        return Problem("stashed-on-ctx", (
            "forward stored tensors as ctx attributes instead of save_for_backward: "
            f"{'; '.join(found.stashed)}. Made in no-grad mode, they have no history, so the "
            "gradient built from them cannot be differentiated. Return intermediates as extra "
            f"outputs and save them with save_for_backward. Seen: {seen}"
        ), "intermediates")  # fmt: skip
    if found.saved_non_differentiable_outputs:
        return Problem("non-differentiable-outputs", (
            "forward saves outputs it marked non-differentiable: "
            f"{'; '.join(found.saved_non_differentiable_outputs)}. Marked so, they come back "
            "from ctx.saved_tensors without history, and the second derivative is lost. Do not "
            f"mark outputs that backward differentiates through. Seen: {seen}"
        ), "intermediates")  # fmt: skip
    if found.saved_intermediates:
        return Problem("saved-intermediate", (
            "forward saved tensors with no autograd history while the inputs require grad: "
            f"{'; '.join(found.saved_intermediates)}. An intermediate result's gradient cannot "
            "be differentiated again. Return it as an extra output (and add its gradient in "
            f"backward), or recompute it in backward from the saved inputs. Seen: {seen}"
        ), "intermediates")  # fmt: skip
    if found.not_reaching:
        return Problem("no-graph", (
            f"the first derivative with respect to {', '.join(found.not_reaching)} has no graph "
            "back to that input, yet the second derivative is not zero: backward uses a tensor "
            "autograd does not track (detached, computed under no_grad, with NumPy or another "
            "library). Use the saved tensors as they are, and wrap non-torch code in a Function "
            f"of its own. Seen: {seen}"
        ), "untracked")  # fmt: skip
    if failure.kind == "raised":
        return Problem("double-backward-raised", (
            f"double backward raises an error. Seen: {seen}"
        ))  # fmt: skip
    if found.multi_output:
        return Problem("wrong-second-derivative", (
            "gradgradcheck fails although the graph reaches the inputs: the second derivative "
            f"is silently wrong. {', '.join(found.multi_output)} has several outputs: its "
            "backward must add the gradients arriving at the extra outputs, which double "
            f"backward sends through them. Seen: {seen}"
        ), "intermediates")  # fmt: skip
    return Problem("wrong-second-derivative", (
        "gradgradcheck fails although the graph reaches the inputs: the second derivative is "
        f"silently wrong (the backward of backward computes something else). Seen: {seen}"
    ))  # fmt: skip


def _notes_on_passing_structure(found: _Structure) -> list[str]:
    notes = []
    if found.stashed:
        notes.append(
            f"tensors kept on ctx ({'; '.join(found.stashed)}) did not break the checks here; "
            "if backward differentiates through them, save them with save_for_backward."
        )
    if found.saved_intermediates:
        notes.append(
            f"tensors saved without history ({'; '.join(found.saved_intermediates)}) did not "
            "break the checks here (backward does not differentiate through them)."
        )
    if found.saved_non_differentiable_outputs:
        notes.append(
            "outputs marked non-differentiable and saved "
            f"({'; '.join(found.saved_non_differentiable_outputs)}) did not break the checks."
        )
    return notes


# -- check() --------------------------------------------------------------------


def check(
    fn: Callable[..., Any],
    *args: Any,
    wrt: tuple[int | str, ...] | list[int | str] | int | str | None = None,
    dtype: torch.dtype = torch.float64,
    points: int = 2,
    fast_mode: bool | None = None,
    third_order: bool = False,
    seed: int = 0,
    name: str | None = None,
    **kwargs: Any,
) -> Report:
    """Check that ``fn`` (a Function's ``apply``, or any function calling one) supports
    double backward when called as ``fn(*args, **kwargs)``; return a
    :class:`~double_backward.checker.Report`.

    ``args`` and ``kwargs`` are passed as they are: tensors of any dtype, numbers, tuples,
    ``None``. The floating-point tensors among them are differentiated (copied to ``dtype``);
    ``wrt`` chooses which, by position or keyword name, e.g. ``check(fn, x, target, 2,
    wrt=(0,))``. Outputs that are not floating tensors (indices, NumPy arrays, numbers) are
    left out, with a note.

    ``report.ok`` is true when no check failed; ``report.problems`` lists each failure with a
    ``diagnosis`` naming the cause and the ``url`` of the page that explains the fix;
    ``report.notes`` says what passed but deserves a look; ``print(report)`` shows it all.

    Options (keyword only; every other keyword goes to ``fn``):

    - ``dtype``: float64 by default; float32 uses looser tolerances. If ``fn`` refuses
      float64, the check is retried in the dtype of your inputs, with a note.
    - ``points``: how many points to check at: your inputs, then points whose values are
      mixed from yours (so a positive or bounded domain is kept).
    - ``fast_mode``: gradcheck's fast mode (a random projection of the Jacobian); by
      default on above 100 differentiated elements, so the cost grows linearly.
    - ``third_order``: also check the third derivative.
    - ``seed``: seeds the points mixed from yours and the weights given to the outputs.
    - ``name``: the name the report shows (by default the Function's).
    """
    if not callable(fn):
        raise TypeError(
            f"check: 'fn' must be callable, e.g. MyFunction.apply, got {fn!r}"
        )
    if dtype not in TOLERANCES:
        raise TypeError(
            f"check: dtype must be one of {list(TOLERANCES)}, got {dtype!r}"
        )
    if not isinstance(points, int) or points < 1:
        raise ValueError(f"check: points must be a positive int, got {points!r}")
    slots = _slots(args, kwargs, wrt)
    report = Report(name or _function_name(fn))
    call = _Call(fn, args, kwargs, slots)
    given = [args[s] if isinstance(s, int) else kwargs[s] for s in slots]
    generator = torch.Generator().manual_seed(seed)

    # Call the Function once, at dtype (or the inputs' own dtype if it refuses dtype).
    inputs = tuple(x.detach().to(dtype).requires_grad_() for x in given)
    outputs, error = _try_outputs(call, inputs)
    own = {x.dtype for x in given}
    if error is not None and len(own) == 1 and dtype not in own:
        retry_dtype = own.pop()
        retry = tuple(x.detach().to(retry_dtype).requires_grad_() for x in given)
        outputs, retry_error = _try_outputs(call, retry)
        if retry_error is None and retry_dtype in TOLERANCES:
            report.notes.append(
                f"the Function refused {dtype} inputs ({_message(error, 160)}); checked in "
                f"{retry_dtype}, the dtype of your inputs, with its tolerances."
            )
            dtype, inputs, error = retry_dtype, retry, None
    if error is not None:
        report.results["call"] = f"raised {_message(error)}"
        report.problems.append(Problem("function-raised", (
            f"calling the Function raised an error at your inputs, so nothing else was "
            f"checked: {_message(error).rstrip('.')}. Check the arguments (positional and keyword) "
            "and their dtypes."
        ), None))  # fmt: skip
        return report
    report.results["call"] = "ok"
    _choose_outputs(call, outputs, report)
    if not call.kept:
        report.problems.append(Problem("no-differentiable-output", (
            "no output is a floating-point tensor that requires grad: there is nothing to "
            "differentiate once, let alone twice. Return torch tensors (not NumPy arrays) and "
            "do not mark the main output non-differentiable."
        )))  # fmt: skip
        return report
    if not _finite(call, outputs, report, "at your inputs"):
        return report

    tol = TOLERANCES[dtype]
    numel = sum(x.numel() for x in inputs)
    fast = numel > FAST_MODE_ABOVE if fast_mode is None else fast_mode
    report.results["inputs"] = ", ".join(
        f"{call.label(s)}: {_describe(x)}" for s, x in zip(slots, inputs, strict=True)
    ) + (" (gradcheck fast mode)" if fast else "")
    found = _guarded(
        report, "graph", lambda: _structure(call, inputs, outputs), _Structure()
    )
    for node in found.once_differentiable:
        report.notes.append(
            f"{node} is marked @once_differentiable (first-order only)."
        )

    weights = [torch.randn(outputs[i].shape, dtype=outputs[i].dtype, generator=generator)
               for i in call.kept]  # fmt: skip
    point_inputs = [inputs]
    for _ in range(points - 1):
        point_inputs.append(
            tuple(_other_point(x.detach(), generator).requires_grad_() for x in inputs)
        )
    checked_points = 0
    for number, at in enumerate(point_inputs, start=1):
        where = f"point {number}" + (" (yours)" if number == 1 else "")
        if number > 1:
            outs, error = _try_outputs(call, at)
            if error is not None:
                report.notes.append(
                    f"{where}, mixed from your inputs' values, was skipped: the Function "
                    f"raised {_message(error, 160)}"
                )
                continue
            if not _finite(call, outs, None, where):
                report.notes.append(
                    f"{where} was skipped: NaN or inf in the outputs there."
                )
                continue
        checked_points += 1
        if not _check_point(call, at, where, tol, fast, found, weights, report):
            return report
    report.results["points checked"] = str(checked_points)

    _guarded(
        report,
        "graph",
        lambda: _zero_second_derivative_note(call, inputs, weights, report),
    )
    report.notes += _notes_on_passing_structure(found)
    report.results["forward vs reverse mode"] = _guarded(
        report,
        "forward mode",
        lambda: _jvp_agreement(call, inputs, weights, tol),
        "skipped",
    )
    if report.results["forward vs reverse mode"].startswith("skipped"):
        report.results["forward-over-reverse HVP"] = (
            "skipped (no forward mode, as above)"
        )
    else:
        report.results["forward-over-reverse HVP"] = _guarded(
            report, "HVP", lambda: _hvp_agreement(call, inputs, weights, tol), "skipped"
        )
    compared = ("forward vs reverse mode", "forward-over-reverse HVP")
    disagreeing = [name for name in compared if report.results[name] == "DISAGREE"]
    if disagreeing:
        report.problems.append(Problem("forward-mode-mismatch", (
            f"forward mode and reverse mode disagree ({', '.join(disagreeing)}): the jvp "
            "staticmethod does not compute the same derivative as backward."
        ), "modern"))  # fmt: skip
    if third_order:
        _guarded(report, "third order",
                 lambda: _check_third_order(call, inputs, weights, tol, fast, report))  # fmt: skip
    report.torch_func = _guarded(
        report, "torch.func", lambda: _torch_func_support(call, inputs, weights), {}
    )
    return report


def _guarded(
    report: Report, stage: str, compute: Callable[[], Any], default: Any = None
) -> Any:
    """Run one of the checker's own stages; if it fails, say so in a note, never crash."""
    try:
        return compute()
    except Exception as error:  # noqa: BLE001
        report.notes.append(
            f"the checker could not complete its {stage} stage: {_message(error)}"
        )
        return default


def _check_third_order(
    call: _Call,
    inputs: tuple[torch.Tensor, ...],
    weights: list[torch.Tensor],
    tol: dict,
    fast: bool,
    report: Report,
) -> None:
    """gradgradcheck of the first derivative: the third derivative against finite differences."""
    first = _first_derivative(call, weights)
    with torch.enable_grad():
        if not first(*inputs):
            report.results["third order"] = "passed (the first derivative is constant)"
            return
    try:
        _run_check(lambda: gradgradcheck(
            first, inputs, **tol, fast_mode=fast, check_undefined_grad=False))  # fmt: skip
        report.results["third order"] = "passed"
    except _Failed as failure:
        report.results["third order"] = f"failed ({failure})"
        report.problems.append(Problem("third-order", (
            "the third derivative is wrong or missing: the backward of backward is not "
            f"itself differentiable. Seen: {failure}"
        )))  # fmt: skip


def _try_outputs(
    call: _Call, inputs: tuple[torch.Tensor, ...]
) -> tuple[list[object], BaseException | None]:
    """Call the Function, noting the tensors it marks non-differentiable (which a wrapper
    such as ``lambda x: F.apply(x)[0]`` may hide from its outputs)."""
    ctx_class = torch.autograd.function.FunctionCtx
    original = ctx_class.mark_non_differentiable
    call.marked = []

    def mark_non_differentiable(ctx: Any, *tensors: torch.Tensor) -> None:
        call.marked += [
            (t.data_ptr(), t.shape) for t in tensors if isinstance(t, torch.Tensor)
        ]
        original(ctx, *tensors)

    # Patched on the class for the length of this one call, restored in `finally`: not
    # thread-safe, so do not check Functions from several threads at once.
    ctx_class.mark_non_differentiable = mark_non_differentiable  # type: ignore[method-assign]
    try:
        with torch.enable_grad():
            return _quietly(lambda: call.outputs(*inputs)), None
    except Exception as error:  # noqa: BLE001 - reported, with its message
        return [], error
    finally:
        ctx_class.mark_non_differentiable = original  # type: ignore[method-assign]


def _choose_outputs(call: _Call, outputs: list[object], report: Report) -> None:
    """Keep the floating outputs that require grad; say why each other one is left out."""
    for index, out in enumerate(outputs):
        if _is_float(out) and out.requires_grad:
            call.kept.append(index)
        elif out is None:
            continue
        elif _is_float(out):
            report.notes.append(
                f"output {index} ({_describe(out)}) does not require grad (marked "
                "non-differentiable, or detached): left out of the checks."
            )
        else:
            report.notes.append(
                f"output {index} is {_kind(out)}, not a floating-point tensor: left out of "
                "the checks."
            )


def _finite(
    call: _Call, outputs: list[object], report: Report | None, where: str
) -> bool:
    bad = [i for i in call.kept if not torch.isfinite(outputs[i]).all()]
    if bad and report is not None:
        report.problems.append(Problem("non-finite", (
            f"output(s) {', '.join(map(str, bad))} contain NaN or inf {where}, so no "
            "derivative can be checked there. Choose inputs inside the Function's domain "
            "(e.g. positive values for a log: --domain positive on the command line)."
        ), None))  # fmt: skip
    return not bad


def _check_point(
    call: _Call,
    at: tuple[torch.Tensor, ...],
    where: str,
    tol: dict,
    fast: bool,
    found: _Structure,
    weights: list[torch.Tensor],
    report: Report,
) -> bool:
    """gradcheck, then gradgradcheck, at one point; False when a problem was found."""
    try:
        _run_check(lambda: gradcheck(call, at, **tol, fast_mode=fast))
        report.results[f"gradcheck, {where}"] = "passed"
    except _Failed as failure:
        report.results[f"gradcheck, {where}"] = f"failed ({failure})"
        if failure.kind == "mismatch":
            report.problems.append(Problem("first-order", (
                "gradcheck fails: backward does not compute the first derivative correctly. "
                f"Fix the first derivative before the second. Seen at {where}: {failure}"
            )))  # fmt: skip
        else:
            report.problems.append(Problem("backward-raised", (
                f"the first backward raises an error, so nothing else was checked. Seen at "
                f"{where}: {failure}"
            ), None))  # fmt: skip
        return False
    try:
        _run_check(lambda: gradgradcheck(
            call, at, **tol, fast_mode=fast, gen_non_contig_grad_outputs=False,
            check_undefined_grad=False,
        ))  # fmt: skip
        report.results[f"gradgradcheck, {where}"] = "passed"
    except _Failed as failure:
        report.results[f"gradgradcheck, {where}"] = f"failed ({failure})"
        found.not_reaching = _not_reaching(call, at, weights)
        report.problems.append(_cause_of_second_order_failure(failure, found, where))
        return False
    return True


def _not_reaching(
    call: _Call, inputs: tuple[torch.Tensor, ...], weights: list[torch.Tensor]
) -> list[str]:
    """The differentiated inputs whose first derivative has no graph back to them."""
    try:
        with torch.enable_grad():
            leaves = tuple(x.detach().requires_grad_() for x in inputs)
            grads = _quietly(lambda: torch.autograd.grad(
                call.scalar(weights)(*leaves), leaves, create_graph=True, allow_unused=True
            ))  # fmt: skip
    except Exception:  # noqa: BLE001 - the failure itself is reported by the caller
        return []
    return [
        call.label(slot)
        for slot, grad, leaf in zip(call.slots, grads, leaves, strict=True)
        if grad is None or not reaches(grad, leaf)
    ]


def _zero_second_derivative_note(
    call: _Call,
    inputs: tuple[torch.Tensor, ...],
    weights: list[torch.Tensor],
    report: Report,
) -> None:
    for label in _not_reaching(call, inputs, weights):
        report.notes.append(
            f"the gradient with respect to {label} has no graph back to {label}, and "
            "gradgradcheck agrees: its second derivative with respect to itself is zero (the "
            "Function is linear or piecewise-linear in it; mixed terms were still checked). "
            "That is an answer, not a problem."
        )


# -- the command line --------------------------------------------------------------


class UsageError(Exception):
    """A command-line argument that cannot be used (exit status 2)."""


def _load(target: str) -> tuple[Callable[..., Any], str]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(
            f"expected module:Function, e.g. double_backward:Square, got {target!r}"
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"cannot load {target}: {_message(error)}") from error
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply, target
    if not callable(obj):
        raise UsageError(f"{target} is neither a torch.autograd.Function nor callable")
    return obj, target


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(size) for size in text.split(",") if size.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"a shape is sizes separated by commas, got {text!r}"
        ) from error


def _range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"a range is two numbers low,high, e.g. -1,1, got {text!r}"
        ) from error
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise argparse.ArgumentTypeError(
            f"a range needs finite low < high, got {text!r}"
        )
    return low, high


def _literal(text: str) -> Any:
    """An extra argument: an int, a float, True/False/None, or else the string itself."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def _keyword(text: str) -> tuple[str, Any]:
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise argparse.ArgumentTypeError(
            f"a keyword argument is NAME=VALUE, got {text!r}"
        )
    return name, _literal(value)


DOMAINS = {
    "real": lambda shape, g: torch.randn(shape, generator=g, dtype=torch.float64),
    "positive": lambda shape, g: (
        torch.rand(shape, generator=g, dtype=torch.float64) * 2 + 0.1
    ),
    "negative": lambda shape, g: (
        -(torch.rand(shape, generator=g, dtype=torch.float64) * 2 + 0.1)
    ),
    "unit": lambda shape, g: (
        torch.rand(shape, generator=g, dtype=torch.float64) * 1.8 - 0.9
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m double_backward.checker",
        description="Check a custom autograd Function for double-backward support. "
        "Exit status: 0 no problem found, 1 problems found, 2 usage error or a Function "
        "that cannot be loaded.",
    )
    parser.add_argument("target", help="module:Function, e.g. double_backward:Square")
    parser.add_argument("--shape", type=_shape, action="append",
                        help="shape of one input tensor, e.g. 3,3 (repeat for several inputs; "
                        "default: one input of shape 3)")  # fmt: skip
    domain = parser.add_mutually_exclusive_group()
    domain.add_argument("--domain", choices=sorted(DOMAINS), default="real",
                        help="where the random inputs lie: real (normal), positive "
                        "(0.1..2.1), negative, unit (-0.9..0.9)")  # fmt: skip
    domain.add_argument("--range", type=_range, metavar="LOW,HIGH",
                        help="draw the inputs uniformly in [LOW, HIGH]")  # fmt: skip
    parser.add_argument("--arg", action="append", type=_literal, default=[], metavar="VALUE",
                        help="an extra positional argument after the tensors (int, float, "
                        "True/False/None or a string); repeat for several")  # fmt: skip
    parser.add_argument("--kwarg", action="append", type=_keyword, default=[],
                        metavar="NAME=VALUE", help="an extra keyword argument, e.g. "
                        "beta=2.0; repeat for several")  # fmt: skip
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--points", type=int, default=2, help="points to check at")
    parser.add_argument("--full", action="store_true",
                        help="gradcheck's full mode even for large inputs (slow)")  # fmt: skip
    parser.add_argument(
        "--third-order", action="store_true", help="also check order three"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 ok, 1 problems, 2 usage error)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse printed the usage error
        return int(exit_.code or 0) and 2
    try:
        fn, name = _load(args.target)
    except UsageError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    generator = torch.Generator().manual_seed(args.seed)
    shapes = args.shape or [(3,)]
    if args.range is not None:
        low, high = args.range
        inputs = [torch.rand(s, generator=generator, dtype=torch.float64) * (high - low) + low
                  for s in shapes]  # fmt: skip
    else:
        inputs = [DOMAINS[args.domain](s, generator) for s in shapes]
    dtype = getattr(torch, args.dtype)
    inputs = [x.to(dtype) for x in inputs]
    try:
        report = check(
            fn, *inputs, *args.arg, dtype=dtype, points=max(args.points, 1),
            fast_mode=False if args.full else None, third_order=args.third_order,
            seed=args.seed, name=name, **dict(args.kwarg),
        )  # fmt: skip
    except (TypeError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else report)
    if "function-raised" in report.problem_names():
        return 2
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
