"""The expected verdicts, from plain torch only: the penalty raising or not, the module whose
own forward created the node whose backward raised, and (for the one silent case) the second
derivative against central differences written out here.

Nothing here imports double_backward.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn


def floats(value: Any) -> list[torch.Tensor]:
    """The floating tensors in nested outputs (tuples, lists, dicts, ModelOutputs)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for item in value.values() for t in floats(item)]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in floats(item)]
    return []


def penalty(
    fn: Callable[..., Any],
    inputs: tuple,
    kwargs: dict,
    parameters: list[torch.Tensor],
    wrt: str | None = "inputs",
    embeddings: list[nn.Module] = (),
) -> None:
    """The gradient penalty a reader runs: R1 (``"inputs"``: the input gradient, then the
    backward to inputs and parameters), MAML (``"parameters"``; ``None``: R1, or MAML when no
    input is floating point, as check_model documents) or, on the embeddings
    (``"embeddings"``), the gradient with respect to the outputs of ``embeddings`` (as
    ``torch.autograd.grad`` takes a tensor inside the graph), then the backward to them and
    the parameters; raises what torch raises."""

    def leaf(t: Any) -> Any:
        is_float = isinstance(t, torch.Tensor) and t.is_floating_point()
        return t.detach().clone().requires_grad_() if is_float else t

    args = [leaf(t) for t in inputs]
    kw = {key: leaf(t) for key, t in kwargs.items()}
    leaves = [
        t
        for t in [*args, *kw.values()]
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    if wrt is None:
        wrt = "inputs" if leaves else "parameters"
    captured: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda m, a, out: captured.append(out))
               for m in (embeddings if wrt == "embeddings" else ())]  # fmt: skip
    try:
        out = floats(fn(*args, **kw))
    finally:
        for handle in handles:
            handle.remove()
    if wrt == "embeddings":
        assert captured, "the embedding was not called"
        leaves, wrt = captured, "inputs"
    torch.manual_seed(1)
    loss = sum(
        (torch.randn(t.shape, dtype=t.dtype) * t).sum() for t in out if t.requires_grad
    )
    first = leaves if wrt == "inputs" else parameters
    second = [*leaves, *parameters] if wrt == "inputs" else parameters
    grads = torch.autograd.grad(loss, first, create_graph=True, allow_unused=True)
    total = sum((g**2).sum() for g in grads if g is not None and g.requires_grad)
    if isinstance(total, torch.Tensor):
        torch.autograd.grad(total, second, allow_unused=True)


def raises(run: Callable[[], None]) -> str | None:
    """The error message the penalty raises, or None."""
    try:
        run()
    except RuntimeError as error:
        return str(error)
    return None


def node_prefix(message: str) -> str:
    """The autograd node class of the op an error names: ``aten::_cdist_backward`` ->
    ``CdistBackward``."""
    match = re.search(r"aten::(\w+)|derivative for '(\w+)'", message)
    assert match, message
    name = (match.group(1) or match.group(2)).removesuffix("_backward")
    return "".join(part.capitalize() for part in name.split("_") if part) + "Backward"


@contextlib.contextmanager
def nodes_created(roots: dict[str, nn.Module]) -> Iterator[dict[str, set[str]]]:
    """For each submodule (by dotted path, prefixed by its root's label when the label is not
    ""), the autograd node types its own forward created: walked from its outputs down to
    the nodes its inputs and parameters came with."""
    created: dict[str, set[str]] = {}
    handles = []
    for label, root in roots.items():
        for name, module in root.named_modules():
            path = ".".join(part for part in (label, name) if part)

            def hook(module, args, kwargs, output, path=path):
                stop = {id(t.grad_fn) for t in floats((args, kwargs)) if t.grad_fn}
                stack = [t.grad_fn for t in floats(output) if t.grad_fn is not None]
                seen: set[int] = set()
                while stack:
                    node = stack.pop()
                    if node is None or id(node) in seen or id(node) in stop:
                        continue
                    seen.add(id(node))
                    created.setdefault(path, set()).add(type(node).__name__)
                    stack.extend(next_node for next_node, _ in node.next_functions)

            handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        yield created
    finally:
        for handle in handles:
            handle.remove()


def raising_modules(
    roots: dict[str, nn.Module], run: Callable[[], None], prefix: str
) -> list[str]:
    """The innermost submodules whose own forward created a node of type ``prefix*``."""
    with nodes_created(roots) as created:
        with contextlib.suppress(RuntimeError):
            run()
    having = [
        path for path, names in created.items()
        if any(n.startswith(prefix) for n in names)
    ]  # fmt: skip
    return sorted(
        path for path in having
        if not any(other != path and (path == "" or other.startswith(path + "."))
                   for other in having)
    )  # fmt: skip


def mixed_second_derivative_error(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    parameters: list[torch.Tensor],
    restore: Callable[[], None],
    step: float = 1e-5,
) -> float:
    """R1's second derivative in float64, uᵀ J v by autograd against central differences
    of the input gradient along v (inputs and parameters), ``restore()`` before each call."""
    x = x.detach().double().requires_grad_()
    generator = torch.Generator().manual_seed(0)
    leaves = [x, *parameters]
    v = [torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in leaves]
    u = torch.randn(x.shape, generator=generator, dtype=x.dtype)

    def input_gradient(create_graph: bool) -> torch.Tensor:
        restore()
        return torch.autograd.grad(fn(x).sum(), x, create_graph=create_graph)[0]

    jt_u = torch.autograd.grad(
        (input_gradient(True) * u).sum(), leaves, allow_unused=True
    )
    analytic = sum(
        float((a * b).sum()) for a, b in zip(jt_u, v, strict=True) if a is not None
    )

    def shifted(t: float) -> torch.Tensor:
        with torch.no_grad():
            for leaf, d in zip(leaves, v, strict=True):
                leaf.add_(t * d)
        try:
            return input_gradient(False).detach()
        finally:
            with torch.no_grad():
                for leaf, d in zip(leaves, v, strict=True):
                    leaf.sub_(t * d)

    jv = (shifted(step) - shifted(-step)) / (2 * step)
    numeric = float((jv * u).sum())
    return abs(analytic - numeric) / max(float(jv.norm()), abs(analytic))
