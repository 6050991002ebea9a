"""Check a whole model for double-backward support, and name the layer that breaks it.

>>> report = check_model(nn.TransformerEncoder(layer, num_layers=2), x)
>>> print(report)  # the verdict first, then one line per break

:func:`~double_backward.check_model` runs what a gradient penalty runs, on a copy of the
model: the forward pass, the gradient with ``create_graph=True`` with respect to the
floating-point inputs and the parameters, and a second backward through that gradient. An
error there is a break of kind ``"raises"``. Then, in float64 (a float64 copy of the model,
where it is an ``nn.Module``), it compares a Hessian-vector product with central differences
of the gradient along a random signed direction: a mismatch that raised nothing is a break of
kind ``"silent"``.

To say where, it records each submodule's inputs during the forward pass (forward hooks), then
checks each submodule the same way on its own inputs. A break is reported in the innermost
submodules that break on their own, by their dotted path from ``named_modules()``
(``layers.1.self_attn``); ``""`` is the model itself. The op is the ATen operator the error
names, or the custom Function found in that submodule's graph.

torch only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from .causes import custom_nodes, is_once_differentiable
from .cuda_fixes import CUDA_FIXES

DOCS_URL = "https://double-backward.readthedocs.io/en/latest/"
BUILTINS_PAGE = DOCS_URL + "auto_examples/plot_14_builtins_without_double_backward.html"
BUILTINS_TABLE = DOCS_URL + "builtins.html"
HIGHER_ORDERS_PAGE = DOCS_URL + "auto_examples/plot_08_higher_orders.html"
FAILURES_PAGE = DOCS_URL + "auto_examples/plot_13_failure_gallery.html"

_SDPA_FIX = (
    "run attention under `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)` (it saves the "
    "L x L attention matrix), or call `double_backward.ops.scaled_dot_product_attention`"
)
_CDIST_FIX = (
    'for p = 2, `torch.cdist(..., compute_mode="use_mm_for_euclid_dist")`; for every p '
    "torch takes (p >= 0 or inf), `double_backward.ops.cdist`"
)
#: The fix for each built-in whose double backward raises, keyed by the ATen operator an error
#: names (its ``_backward`` stripped) or by the op's OpInfo name. The built-ins table on the
#: site and :func:`~double_backward.check_model` both read it.
FIXES: dict[str, str] = {
    "_scaled_dot_product_flash_attention_for_cpu": _SDPA_FIX,
    "nn.functional.scaled_dot_product_attention": _SDPA_FIX,
    "nn.TransformerEncoderLayer (train)": _SDPA_FIX,
    "nn.TransformerEncoderLayer (eval)": _SDPA_FIX,
    # need_weights=True (the default) computes the softmax itself: the built-ins scan passes.
    "nn.MultiheadAttention": _SDPA_FIX
    + "; or leave `need_weights=True`, the default, which does not call the fused kernel",
    "_cdist": _CDIST_FIX,
    "cdist": _CDIST_FIX,
    "_ctc_loss": "`double_backward.ops.ctc_loss`, a log-space recursion of differentiable ops",
    "nn.functional.ctc_loss": (
        "`double_backward.ops.ctc_loss`, a log-space recursion of differentiable ops"
    ),
    "_pdist": "`double_backward.ops.pdist`",
    "nn.functional.pdist": "`double_backward.ops.pdist`",
    # The same values from ops that have a double backward (their second derivative is 0).
    "hardsigmoid": "`F.relu6(x + 3) / 6`, the same function",
    "nn.functional.hardsigmoid": "`F.relu6(x + 3) / 6`, the same function",
    "_embedding_bag_per_sample_weights": (
        "`F.embedding(...) * per_sample_weights[:, None]`, then `index_add` per bag"
    ),
    "nn.functional.embedding_bag": (
        "`F.embedding(...) * per_sample_weights[:, None]`, then `index_add` per bag"
    ),
    # It raises with weight=None and a bias, through F.layer_norm too; an explicit weight of
    # ones passes the penalty and gradgradcheck (checked with plain torch, 2.13).
    "native_layer_norm": (
        "pass an explicit `weight=torch.ones(normalized_shape)` when there is a bias: "
        "`weight=None` with a bias raises in `F.layer_norm` too"
    ),
}
FIXES.update(CUDA_FIXES)  # the fused attention kernels and cuDNN RNNs, on CUDA
_NO_FIX = (
    "no switch in torch: compute it with differentiable ops, or in a custom Function whose "
    "backward is differentiable (read: " + DOCS_URL
    + "auto_examples/plot_04_untracked_backward.html)"
)  # fmt: skip


def fix_for(op: str) -> str:
    """The fix for the built-in ``op`` (an ATen or OpInfo name), or how to write one."""
    name = op.removeprefix("aten::").removesuffix(".default").removesuffix("_backward")
    return FIXES.get(name) or FIXES.get(op) or _NO_FIX


@dataclasses.dataclass(frozen=True)
class Break:
    """Where double backward breaks: ``module`` (dotted path), ``op``, ``kind``, ``message``.

    ``kind`` is ``"raises"`` (the gradient penalty raised ``message``) or ``"silent"`` (no
    error, but the second derivative disagrees with finite differences of the first).
    ``fix`` is the built-ins table's fix for ``op``, or the page to read.
    """

    module: str
    op: str
    kind: str
    message: str
    fix: str

    def __str__(self) -> str:
        where = self.module or "(the model itself)"
        text = _wrap(f"[{self.kind}] {where}: {self.op}: {self.message}", "", "    ")
        text += "\n" + _wrap(f"fix: {self.fix}", "    ", "      ")
        if self.op.startswith("aten::"):  # a built-in: the table has its row
            text += f"\n    read: {BUILTINS_TABLE}"
        return text


@dataclasses.dataclass
class ModelReport:
    """What :func:`~double_backward.check_model` found: ``breaks`` (empty when all is well).

    ``checked`` says what was run, ``skipped`` what was not differentiated.
    """

    model: str
    checked: list[str] = dataclasses.field(default_factory=list)
    breaks: list[Break] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no break was found."""
        return not self.breaks

    def __str__(self) -> str:
        if self.ok:
            verdict = "ok, double backward works at the point checked."
        else:
            count = len(self.breaks)
            verdict = f"{count} break{'s' if count > 1 else ''} of double backward."
        lines = [f"{self.model}: {verdict}"]
        lines += [textwrap.indent(str(found), "  ") for found in self.breaks]
        lines += [_wrap(f"checked: {item}", "  ", "    ") for item in self.checked]
        lines += [_wrap(f"skipped: {item}", "  ", "    ") for item in self.skipped]
        return "\n".join(lines)


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(
        text, 79, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


# -- values: the floating-point tensors in nested arguments -----------------------------
def _map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_map_tensors(item, fn) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(item, fn) for item in value)
    if isinstance(value, dict):
        return {key: _map_tensors(item, fn) for key, item in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    _map_tensors(value, found.append)
    return found


def _as_leaf(dtype: torch.dtype | None) -> Callable[[torch.Tensor], torch.Tensor]:
    def convert(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        if not tensor.is_floating_point():
            return tensor
        if dtype is not None:
            tensor = tensor.to(dtype)
        return tensor.clone().requires_grad_()

    return convert


# -- one check: a gradient penalty, then an HVP against finite differences ----------------
class _Target:
    """A callable with the leaves it is differentiated by, and how to re-run it the same way."""

    def __init__(
        self, fn: Callable[..., Any], args: tuple, kwargs: dict, parameters: list
    ) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.inputs = [t for t in _tensors((args, kwargs)) if t.requires_grad]
        self.parameters = parameters
        self.wrt = [*self.inputs, *parameters]
        self.weights: list[torch.Tensor] | None = None

    def scalar(self) -> torch.Tensor:
        """A fixed random weighting of the floating outputs: the loss the penalty is on."""
        # The same random numbers on every call: dropout draws the same masks each time.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            try:
                outputs = _tensors(self.fn(*self.args, **self.kwargs))
            except Exception as error:  # noqa: BLE001 - the forward failing is not a break
                raise _NotDifferentiable(
                    f"calling the model raised {_first_line(error)}"
                ) from error
        outputs = [t for t in outputs if t.is_floating_point() and t.requires_grad]
        if not outputs:
            raise _NotDifferentiable("no floating-point output depends on the inputs")
        if self.weights is None:
            generator = torch.Generator().manual_seed(1)
            self.weights = [
                torch.randn(t.shape, generator=generator, dtype=t.dtype)
                for t in outputs
            ]
        return sum((w * t).sum() for w, t in zip(self.weights, outputs, strict=True))  # type: ignore[return-value]

    def gradient(self, create_graph: bool) -> list[torch.Tensor]:
        grads = torch.autograd.grad(
            self.scalar(), self.wrt, create_graph=create_graph, allow_unused=True
        )
        return [
            torch.zeros_like(leaf) if g is None else g
            for g, leaf in zip(grads, self.wrt, strict=True)
        ]


class _NotDifferentiable(Exception):
    pass


@dataclasses.dataclass
class _Outcome:
    kind: str | None  # None (works), "raises" or "silent"
    message: str = ""
    graph: list[Any] = dataclasses.field(default_factory=list)


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0].rstrip(',')}"


def _penalty(target: _Target) -> _Outcome:
    """The gradient penalty: create_graph gradient, squared, summed, differentiated."""
    try:
        grads = target.gradient(create_graph=True)
    except _NotDifferentiable:
        raise
    except RuntimeError as error:
        return _Outcome("raises", _first_line(error))
    graph = [g for g in grads if g.requires_grad]
    if not graph:
        return _Outcome(None)  # no graph: the HVP check says whether that is right
    penalty = sum((g**2).sum() for g in graph)
    try:
        torch.autograd.grad(penalty, target.wrt, allow_unused=True)
    except RuntimeError as error:
        return _Outcome("raises", _first_line(error), graph)
    return _Outcome(None, graph=graph)


def _hvp_mismatch(target: _Target, step: float = 1e-6) -> str | None:
    """Compare H v with (g(θ + εv) − g(θ − εv)) / 2ε, v random ±1; the mismatch, if any."""
    generator = torch.Generator().manual_seed(2)
    direction = [
        torch.randint(0, 2, leaf.shape, generator=generator).to(leaf.dtype) * 2 - 1
        for leaf in target.wrt
    ]
    grads = target.gradient(create_graph=True)
    product = sum((g * v).sum() for g, v in zip(grads, direction, strict=True))
    if product.requires_grad:
        hvp = torch.autograd.grad(product, target.wrt, allow_unused=True)
        hvp = [
            torch.zeros_like(v) if h is None else h
            for h, v in zip(hvp, direction, strict=True)
        ]
    else:  # no graph at all: autograd's second derivative is zero
        hvp = [torch.zeros_like(v) for v in direction]

    def shifted(sign: float) -> list[torch.Tensor]:
        with torch.no_grad():
            for leaf, v in zip(target.wrt, direction, strict=True):
                leaf.add_(sign * step * v)
        try:
            return [g.detach() for g in target.gradient(create_graph=False)]
        finally:
            with torch.no_grad():
                for leaf, v in zip(target.wrt, direction, strict=True):
                    leaf.sub_(sign * step * v)

    plus, minus = shifted(1.0), shifted(-1.0)
    for h, p, m in zip(hvp, plus, minus, strict=True):
        numeric = (p - m) / (2 * step)
        scale = max(numeric.abs().max().item(), 1.0) if numeric.numel() else 1.0
        if not torch.allclose(h.detach(), numeric, rtol=1e-3, atol=1e-4 * scale):
            off = (h.detach() - numeric).abs().max().item()
            return (
                "the Hessian-vector product differs from central differences of the "
                f"gradient by up to {off:.3g}, with no error raised"
            )
    return None


def _check(target: _Target, *, hvp: bool) -> _Outcome:
    outcome = _penalty(target)
    if outcome.kind or not hvp:
        return outcome
    mismatch = _hvp_mismatch(target)
    return _Outcome("silent", mismatch, outcome.graph) if mismatch else outcome


# -- the model, its copies and its submodules -------------------------------------------
def _copy(model: Callable[..., Any], dtype: torch.dtype | None) -> Callable[..., Any]:
    if not isinstance(model, nn.Module):
        return model
    copied = copy.deepcopy(model)
    return copied.to(dtype) if dtype is not None else copied


@contextlib.contextmanager
def _recording(
    model: Callable[..., Any],
) -> Iterator[list[tuple[str, nn.Module, tuple, dict]]]:
    """Each submodule call's (name, module, args, kwargs), in the order the calls end."""
    calls: list[tuple[str, nn.Module, tuple, dict]] = []
    handles = []
    if isinstance(model, nn.Module):
        for name, module in model.named_modules():

            def hook(module, args, kwargs, output, name=name):
                keep = _as_leaf(None)
                calls.append((name, module, _map_tensors(args, keep),
                              _map_tensors(kwargs, keep)))  # fmt: skip

            handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _parameters(module: Any) -> list[torch.Tensor]:
    if not isinstance(module, nn.Module):
        return []
    return [p for p in module.parameters() if p.requires_grad and p.is_floating_point()]


def _innermost(failing: dict[str, _Outcome]) -> list[str]:
    """The failing submodules none of whose own submodules fail."""
    return [
        name for name in failing
        if not any(other != name and (name == "" or other.startswith(name + "."))
                   for other in failing)
    ]  # fmt: skip


_ATEN_IN_MESSAGE = re.compile(r"aten::(\w+)|derivative for '(\w+)'")


def _name_break(name: str, outcome: _Outcome, target: _Target) -> Break:
    """The op that breaks, and its fix: from the error's ATen name, or the module's graph."""
    match = _ATEN_IN_MESSAGE.search(outcome.message)
    if match:
        op = "aten::" + (match.group(1) or match.group(2)).removesuffix("_backward")
        return Break(name, op, outcome.kind or "", outcome.message, fix_for(op))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        outputs = _tensors(target.fn(*target.args, **target.kwargs))
    functions = custom_nodes(outputs)
    once = [node for node in functions if is_once_differentiable(node)]
    if once or functions:
        node = (once or functions)[0]
        op = node._forward_cls.__name__
        fix = ("backward is `@once_differentiable`: write it with differentiable ops "
               f"(read: {HIGHER_ORDERS_PAGE})" if once else
               f"check it with double_backward.check (read: {FAILURES_PAGE})")  # fmt: skip
        return Break(name, op, outcome.kind or "", outcome.message, fix)
    return Break(
        name, "(not identified)", outcome.kind or "", outcome.message,
        f"read: {BUILTINS_PAGE}",
    )  # fmt: skip


def _model_name(model: Callable[..., Any]) -> str:
    return (
        type(model).__name__
        if isinstance(model, nn.Module)
        else getattr(model, "__qualname__", type(model).__name__)
    )


def check_model(model: Callable[..., Any], *inputs: Any) -> ModelReport:
    """Check that a gradient penalty works through ``model(*inputs)``, and where it breaks.

    ``model`` is an ``nn.Module`` or any callable returning a tensor or a tuple of tensors.
    It is differentiated with respect to the floating-point tensors among ``inputs`` and the
    model's parameters that require grad; other inputs and the buffers are passed as they
    are, and listed as skipped. The model itself is not changed: the checks run on copies.
    """
    if not callable(model):
        raise TypeError(
            f"check_model: 'model' must be an nn.Module or a callable, got {type(model).__name__}"
        )
    report = ModelReport(_model_name(model))
    floats = [t for t in _tensors(inputs) if t.is_floating_point()]
    others = [t for t in _tensors(inputs) if not t.is_floating_point()]
    if others:
        report.skipped.append(
            f"{len(others)} input tensor(s) that are not floating point "
            f"({', '.join(sorted({str(t.dtype) for t in others}))}): not differentiated"
        )
    plain = [v for v in inputs if not isinstance(v, (torch.Tensor, tuple, list, dict))]
    if plain:
        report.skipped.append(f"{len(plain)} non-tensor input(s), passed as they are")
    if isinstance(model, nn.Module) and any(True for _ in model.buffers()):
        names = [name for name, _ in model.named_buffers()]
        report.skipped.append(f"buffers, not differentiated: {', '.join(names)}")
    frozen = [] if not isinstance(model, nn.Module) else [
        name for name, p in model.named_parameters() if not p.requires_grad
    ]  # fmt: skip
    if frozen:
        report.skipped.append(
            f"parameters with requires_grad=False: {', '.join(frozen)}"
        )
    if not floats and not _parameters(model):
        raise ValueError(
            "check_model: nothing to differentiate: no floating-point input and no "
            "parameter that requires grad"
        )

    # In the model's own dtypes, where the kernels it trains with are chosen.
    native = _copy(model, None)
    with _recording(native) as native_calls:
        target = _Target(native, _map_tensors(inputs, _as_leaf(None)), {},
                         _parameters(native))  # fmt: skip
        try:
            outcome = _penalty(target)
        except _NotDifferentiable as error:
            raise ValueError(f"check_model: {error}") from error
    report.checked.append(
        f"a gradient penalty with respect to {len(target.inputs)} input(s) and "
        f"{len(target.parameters)} parameter tensor(s), in the model's dtypes"
    )
    calls, hvp = native_calls, False
    if outcome.kind is None:
        # In float64, where central differences are accurate enough to compare with.
        wide = _copy(model, torch.float64)
        with _recording(wide) as wide_calls:
            target = _Target(wide, _map_tensors(inputs, _as_leaf(torch.float64)), {},
                             _parameters(wide))  # fmt: skip
            outcome = _check(target, hvp=True)
        report.checked.append(
            "the Hessian-vector product against central differences of the gradient, in "
            "float64" + ("" if isinstance(model, nn.Module) else " inputs")
        )
        calls, hvp = wide_calls, True
    if outcome.kind is None:
        return report
    report.breaks.extend(_locate(calls, outcome, target, hvp))
    return report


def _locate(
    calls: list[tuple[str, nn.Module, tuple, dict]],
    whole: _Outcome,
    target: _Target,
    hvp: bool,
) -> list[Break]:
    """Check each submodule on the inputs it was called with; the innermost that break."""
    failing: dict[str, tuple[_Outcome, _Target]] = {}
    for name, module, args, kwargs in calls:
        if name in failing or name == "":
            continue
        sub = _Target(module, args, kwargs, _parameters(module))
        if not sub.wrt:
            continue
        try:
            outcome = _check(sub, hvp=hvp)
        except _NotDifferentiable:
            continue
        if outcome.kind:
            failing[name] = (outcome, sub)
    if not failing:
        return [_name_break("", whole, target)]
    innermost = _innermost({name: outcome for name, (outcome, _) in failing.items()})
    return [_name_break(name, *failing[name]) for name in innermost]


__all__ = ["FIXES", "Break", "ModelReport", "check_model", "fix_for"]
