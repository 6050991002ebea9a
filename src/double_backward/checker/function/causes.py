"""Naming the cause of a failure, from what the autograd graph shows.

Structure explains, it does not accuse: the graph is read (tensors saved without history,
tensors kept on ``ctx``, outputs marked non-differentiable, ``@once_differentiable``, a gradient
with no graph back to its input) only to name the cause of a check that failed. A suspicious
pattern that did not fail becomes a note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ...graph_walks import reaches
from ..shared.report import Problem
from .calling import Call, describe, differentiable, flatten, quietly
from .evidence import (
    NON_FINITE_SECOND,
    Failed,
    Settings,
    draw,
    wrong_second_derivatives,
)

_ONCE_DIFFERENTIABLE_MESSAGE = "marked with @once_differentiable"
_NO_GRAPH_MESSAGE = "does not require grad and does not have a grad_fn"


@dataclasses.dataclass
class Structure:
    """What the graph shows; each entry names a tensor (where, dtype, shape)."""

    custom_nodes: int = 0
    stashed: list[str] = dataclasses.field(default_factory=list)
    saved_intermediates: list[str] = dataclasses.field(default_factory=list)
    saved_non_differentiable_outputs: list[str] = dataclasses.field(default_factory=list)
    once_differentiable: list[str] = dataclasses.field(default_factory=list)
    multi_output: list[str] = dataclasses.field(default_factory=list)
    not_reaching: list[str] = dataclasses.field(default_factory=list)
    # After a failure: wrong second-derivative terms whose gradient has no graph back to the
    # input, as (gradient's input, input) labels; what backward did outside autograd.
    untracked_terms: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    backward_untracked: list[str] = dataclasses.field(default_factory=list)
    cleared_state: list[str] = dataclasses.field(default_factory=list)  # by one backward
    backward_used: set[int] | None = None  # data_ptrs the backward's torch ops read
    pointers: dict[str, int] = dataclasses.field(default_factory=dict)  # entry -> data_ptr

    def used(self, entries: list[str]) -> list[str]:
        """The entries backward's torch operations read (all, if that was not watched)."""
        if self.backward_used is None:
            return entries
        return [e for e in entries if self.pointers.get(e) in self.backward_used]
    # What is checked: "custom" (a Function's apply), "composite" (a function calling
    # custom Functions) or "builtin" (torch's own operators only).
    what: str = "custom"


def custom_nodes(tensors: Sequence[object]) -> list[Any]:
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


def is_once_differentiable(node: Any) -> bool:
    backward = getattr(getattr(node, "_forward_cls", None), "backward", None)
    code = getattr(backward, "__code__", None)
    return (
        hasattr(backward, "__wrapped__")
        and code is not None
        and code.co_filename == torch.autograd.function.__file__
    )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype


def structure(
    call: Call, inputs: Sequence[torch.Tensor], outputs: list[object], custom: bool
) -> Structure:
    """Read the graph of the checked outputs: what each custom Function saved or kept."""
    found = Structure()
    checked = [outputs[i] for i in call.kept]
    nodes = custom_nodes(checked)
    found.custom_nodes = len(nodes)
    found.what = "custom" if custom else ("composite" if nodes else "builtin")
    tensor_outputs = [o for o in outputs if isinstance(o, torch.Tensor)]
    constants = call.constants()
    elsewhere = _kept_at_another_point(call, inputs, len(nodes))
    for number, node in enumerate(nodes):
        name = getattr(node, "_forward_cls", type(node)).__name__
        if is_once_differentiable(node):
            found.once_differentiable.append(f"{name}.backward")
        for attribute, value in _ctx_tensors(node):
            if (differentiable(value) and not value.requires_grad
                    and not _constant(value, elsewhere, (number, attribute))):  # fmt: skip
                found.stashed.append(f"ctx.{attribute} in {name} ({describe(value)})")
                found.pointers[found.stashed[-1]] = value.data_ptr()
        for index, tensor in enumerate(_saved(node)):
            if not differentiable(tensor) or tensor.requires_grad:
                continue  # integers never need history; a tensor with history is fine
            where = f"saved tensor #{index} of {name} ({describe(tensor)})"
            marked = (tensor.data_ptr(), tensor.shape) in call.marked
            if marked or any(_same(tensor, out) for out in tensor_outputs):
                found.saved_non_differentiable_outputs.append(where)
            elif not any(_same(tensor, x) for x in (*inputs, *constants)) and not _constant(
                tensor, elsewhere, (number, index)
            ):
                # Not an input we differentiate, nor a constant: made from the inputs.
                found.saved_intermediates.append(where)
                found.pointers[where] = tensor.data_ptr()
        # One metadata entry per output of forward, even those a wrapper drops.
        count = len(getattr(node, "_input_metadata", ()))
        if count > 1:
            found.multi_output.append(f"{name} ({count} outputs)")
    return found


def clears_state_problem(cleared: list[str], seen: str) -> Problem:
    return Problem("backward-clears-state", (
        f"backward clears state it needs ({'; '.join(cleared)}) after one call, so a second "
        "backward through the same graph fails. Double backward makes one whenever the "
        "gradient depends on a saved output (its derivative runs this backward again), and "
        "so do retain_graph=True and gradcheck. Leave the attribute as it is (autograd frees "
        f"ctx with the graph), or keep tensors with save_for_backward. Seen: {seen}"
    ))  # fmt: skip


def cleared_state(call: Call, at: Sequence[torch.Tensor]) -> list[str]:
    """The ctx attributes that one backward set to None or deleted (state freed early, e.g.
    ``ctx.backward_cache = None``), each named with its Function."""
    with torch.enable_grad():
        leaves = tuple(x.detach().requires_grad_() for x in at)
        all_outputs = quietly(lambda: call.outputs(*leaves))
        outputs = [all_outputs[i] for i in call.kept]
        nodes = custom_nodes(outputs)
        before = [[k for k, v in vars(n).items() if v is not None] for n in nodes]
        total = sum((o * torch.ones_like(o)).sum().real for o in outputs)
        try:
            quietly(lambda: torch.autograd.grad(total, leaves, allow_unused=True,
                                                retain_graph=True))  # fmt: skip
        except Exception:  # noqa: BLE001 - what matters is the state left behind
            pass
    return [
        f"ctx.{key} in {getattr(node, '_forward_cls', type(node)).__name__}"
        for node, keys in zip(nodes, before, strict=True)
        for key in keys
        if vars(node).get(key) is None
    ]


def _saved(node: Any) -> tuple[Any, ...]:
    try:
        return tuple(node.saved_tensors)
    except RuntimeError:  # already freed, or unpack refused: nothing to name
        return ()


def _ctx_tensors(node: Any) -> list[tuple[str, Any]]:
    """The ctx attributes, with tensors inside tuples, lists and dicts named by their place
    (``Q_LU[0]``: qpth keeps an LU factor and its pivots in a tuple)."""
    found: list[tuple[str, Any]] = []

    def visit(name: str, value: Any, depth: int) -> None:
        if isinstance(value, (tuple, list)) and depth < 3:
            for i, item in enumerate(value):
                visit(f"{name}[{i}]", item, depth + 1)
        elif isinstance(value, dict) and depth < 3:
            for key, item in value.items():
                visit(f"{name}[{key!r}]", item, depth + 1)
        else:
            found.append((name, value))

    for attribute, value in sorted(vars(node).items()):
        visit(attribute, value, 0)
    return found


def _kept_at_another_point(call: Call, inputs: Sequence[torch.Tensor], count: int
                           ) -> dict[tuple[int, int | str], torch.Tensor] | None:  # fmt: skip
    """What each custom Function saved (by node and index) or kept on ctx (by node and
    attribute) when called at other inputs (each moved by half its own size, at random, so
    that signs and masks change too): a tensor identical there is a constant (a weight, a
    scale), not a result made from the inputs. None when the call there fails or builds
    another graph."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    moved = []
    for x in inputs:
        size = max(float(x.detach().abs().pow(2).mean()) ** 0.5 if x.numel() else 0.0, 1.0)
        drawn = draw(x.detach(), generator)  # drawn on the CPU, moved to x's device
        moved.append(x.detach() + 0.5 * size * drawn)
    try:
        with torch.enable_grad():
            leaves = [x.requires_grad_() for x in moved]
            all_outputs = quietly(lambda: call.outputs(*leaves, fresh=True))
            nodes = custom_nodes([all_outputs[i] for i in call.kept])
    except Exception:  # noqa: BLE001 - no comparison: every tensor counts as made from inputs
        return None
    if len(nodes) != count:
        return None
    kept: dict[tuple[int, int | str], torch.Tensor] = {}
    for number, node in enumerate(nodes):
        kept.update({(number, i): t for i, t in enumerate(_saved(node))})
        kept.update({(number, a): t for a, t in _ctx_tensors(node)})
    return kept


def _constant(tensor: torch.Tensor, elsewhere: dict | None, key: tuple[int, int | str]) -> bool:
    other = None if elsewhere is None else elsewhere.get(key)
    return (isinstance(other, torch.Tensor) and other.shape == tensor.shape
            and other.dtype == tensor.dtype and torch.equal(other, tensor))  # fmt: skip


def not_reaching(
    call: Call, inputs: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]
) -> list[str]:
    """The differentiated inputs whose first derivative has no graph back to them."""
    try:
        with torch.enable_grad():
            leaves = tuple(x.detach().requires_grad_() for x in inputs)
            grads = quietly(lambda: torch.autograd.grad(
                call.scalar(weights)(*leaves), leaves, create_graph=True, allow_unused=True
            ))  # fmt: skip
    except Exception:  # noqa: BLE001 - the failure itself is reported by the caller
        return []
    return [
        call.label(slot)
        for slot, grad, leaf in zip(call.slots, grads, leaves, strict=True)
        if grad is None or not reaches(grad, leaf)
    ]


def cause_of_second_order_failure(failure: Failed, found: Structure, where: str) -> Problem:
    """The problem that best explains a failed second-order check."""
    seen = f"{where}: {failure}"
    text = failure.text
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
        ), "inplace")  # fmt: skip
    if failure.kind == "raised" and found.cleared_state:
        return clears_state_problem(found.cleared_state, seen)
    if NON_FINITE_SECOND in text:
        return Problem("non-finite-second-derivative", (
            "the second derivative is NaN or inf where the outputs and the first derivative "
            "are finite: backward applies an operation whose derivative is infinite at values "
            "it meets (sqrt or a power below 1 at 0, log at 0, a division by 0), and double "
            "backward multiplies that infinity by zero. Write backward so that no operation "
            "is differentiated at its singular point (e.g. torch.where(y > 0, y, 1).sqrt() * "
            f"(y > 0) instead of y.sqrt()). Seen: {seen}"
        ), "deriving")  # fmt: skip
    if failure.kind == "raised" and _NO_GRAPH_MESSAGE not in text:
        # An error says more than any pattern: an operator with no double backward, a
        # NotImplementedError. Tried before the graph rules, which fit any linear input.
        if found.what == "builtin":
            return Problem("double-backward-raised", (
                "double backward raises an error inside PyTorch's own operators: one of them "
                "has no derivative of its backward. Replace it by a Function that supports "
                f"double backward, or avoid differentiating through it twice. Seen: {seen}"
            ), "builtins")  # fmt: skip
        return Problem("double-backward-raised", f"double backward raises an error. Seen: {seen}")
    stashed = found.used(found.stashed)
    saved_intermediates = found.used(found.saved_intermediates)
    if stashed:
        return Problem("stashed-on-ctx", (
            "forward stored tensors as ctx attributes instead of save_for_backward: "
            f"{'; '.join(stashed)}. Made in no-grad mode, they have no history, so the "
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
    if saved_intermediates:
        return Problem("saved-intermediate", (
            "forward saved tensors with no autograd history while the inputs require grad: "
            f"{'; '.join(saved_intermediates)}. An intermediate result's gradient cannot "
            "be differentiated again. Return it as an extra output (and add its gradient in "
            f"backward), or recompute it in backward from the saved inputs. Seen: {seen}"
        ), "intermediates")  # fmt: skip
    if found.untracked_terms or found.not_reaching or _NO_GRAPH_MESSAGE in text:
        return _no_graph(found, seen)
    if found.multi_output:
        return Problem("wrong-second-derivative", (
            "the second derivative is silently wrong, although the graph reaches the inputs. "
            f"{', '.join(found.multi_output)} has several outputs: its backward must add the "
            "gradients arriving at the extra outputs, which double backward sends through "
            f"them. Seen: {seen}"
        ), "intermediates")  # fmt: skip
    return Problem("wrong-second-derivative", (
        "the second derivative is silently wrong, although the graph reaches the inputs (the "
        f"backward of backward computes something else). Seen: {seen}"
    ), "deriving")  # fmt: skip


def _no_graph(found: Structure, seen: str) -> Problem:
    how = (f" Backward {' and '.join(found.backward_untracked)}."
           if found.backward_untracked else "")  # fmt: skip
    terms = found.untracked_terms
    if terms and all(grad_of != wrt for grad_of, wrt in terms):
        lost = "; ".join(f"d/d({wrt}) of the gradient with respect to {grad_of}"
                         for grad_of, wrt in terms)  # fmt: skip
        return Problem("no-graph", (
            f"only a mixed term of the second derivative is lost: {lost}. The gradient with "
            "respect to "
            + "; ".join(f"{grad_of} has no graph back to {wrt}" for grad_of, wrt in terms)
            + f", yet depends on it; every other second derivative is right.{how} Use the "
            f"saved tensor itself (not .data, .detach() or a NumPy copy). Seen: {seen}"
        ), "untracked")  # fmt: skip
    inputs = ", ".join(sorted({g for g, _ in terms})) or ", ".join(found.not_reaching) or (
        "its inputs")  # fmt: skip
    how = how or (" It uses a tensor autograd does not track (detached, computed under "
                  "no_grad, with NumPy or another library).")  # fmt: skip
    return Problem("no-graph", (
        f"the first derivative with respect to {inputs} has no graph back to the inputs, "
        f"yet the second derivative is not zero: backward computes outside autograd.{how} "
        "Use the saved tensors as they are, and wrap non-torch code in a Function of its "
        f"own. Seen: {seen}"
    ), "untracked")  # fmt: skip


def untracked_terms(call: Call, at: Sequence[torch.Tensor], weights: Sequence[torch.Tensor],
                    s: Settings) -> list[tuple[str, str]]:
    """The wrong terms of the second derivative whose gradient has no graph to the
    input."""
    wrong = wrong_second_derivatives(call, tuple(at), s)
    with torch.enable_grad():
        leaves = tuple(x.detach().requires_grad_() for x in at)
        grads = quietly(lambda: torch.autograd.grad(
            call.scalar(weights)(*leaves), leaves, create_graph=True,
            allow_unused=True))  # fmt: skip
    return [
        (call.label(call.slots[j]), call.label(call.slots[i]))
        for j, i in wrong
        if grads[j] is None or not reaches(grads[j], leaves[i])
    ]


class _Watch(TorchFunctionMode):
    """Records what a backward does: tensors its torch operations read, and what it does
    outside autograd (NumPy, .data, .detach(), no_grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.used: set[int] = set()
        self.untracked: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]  # noqa: E501
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "__get__":  # a property: Tensor.data, Tensor.T, ...
            name = getattr(getattr(func, "__self__", None), "__name__", name)
        what = {"numpy": "calls .numpy()", "data": "reads .data", "detach": "calls .detach()"}
        if name in what:
            if what[name] not in self.untracked:
                self.untracked.append(what[name])
        elif not torch.is_grad_enabled():
            if "runs operations under no_grad" not in self.untracked:
                self.untracked.append("runs operations under no_grad")
        else:
            tensors = [t for t in flatten([*args, *kwargs.values()])
                       if isinstance(t, torch.Tensor)]  # fmt: skip
            self.used.update(t.data_ptr() for t in tensors)
        return func(*args, **kwargs)


def watch_backward(call: Call, at: Sequence[torch.Tensor], found: Structure,
                   weights: Sequence[torch.Tensor]) -> None:
    """Run backward once with each custom Function's backward watched (patched on its class
    for this one call, then restored: not thread-safe)."""  # fmt: skip
    with torch.enable_grad():
        leaves = tuple(x.detach().requires_grad_() for x in at)
        all_outputs = quietly(lambda: call.outputs(*leaves))
        outputs = [all_outputs[i] for i in call.kept]
        # This call's own tensors: the pointers of the entries found at the first call.
        found.pointers = structure(call, leaves, all_outputs, True).pointers
        classes = {node._forward_cls for node in custom_nodes(outputs)}
        watch = _Watch()
        originals = {cls: cls.__dict__.get("backward") for cls in classes}
        for cls in classes:
            inner = cls.backward

            def watched(ctx, *grads, inner=inner):  # type: ignore[no-untyped-def]
                with watch:
                    return inner(ctx, *grads)

            cls.backward = staticmethod(watched)
        try:
            total = sum((o * w).sum() for o, w in zip(outputs, weights, strict=True))
            quietly(lambda: torch.autograd.grad(total, leaves, create_graph=True,
                                                allow_unused=True))  # fmt: skip
        finally:
            for cls, original in originals.items():
                if original is None:
                    del cls.backward
                else:
                    cls.backward = original
    found.backward_used = watch.used
    found.backward_untracked = watch.untracked


def notes_on_passing_structure(found: Structure) -> list[str]:
    """Suspicious patterns that broke nothing: notes, not problems."""
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


def zero_second_derivative_notes(
    call: Call, inputs: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]
) -> list[str]:
    """A gradient with no graph back to its input, all checks passing: a zero second
    derivative (an answer, not a problem)."""
    return [
        f"the gradient with respect to {label} has no graph back to {label}, and the checks "
        "agree: its second derivative with respect to itself is zero (mixed terms were still "
        "checked)."
        for label in not_reaching(call, inputs, weights)
    ]
