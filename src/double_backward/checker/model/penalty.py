"""Running a gradient penalty on a model, and comparing its second derivative with finite
differences of its first.

:class:`Target` is one callable (the model, or a submodule on its recorded arguments) with the
leaves it is differentiated by. ``wrt`` says which penalty runs:

- ``"inputs"``: what R1 and WGAN-GP run: the gradient with respect to the inputs
  (``create_graph=True``), its squared norm, then the backward to the inputs and parameters;
- ``"parameters"``: what MAML runs: the gradient with respect to the parameters, then the
  backward to the parameters;
- ``"both"``: the gradient with respect to both, then the backward to both;
- ``"embeddings"``: a penalty or adversarial step on the embeddings: the gradient with
  respect to the output of the model's input embedding (a zero leaf added to each of its
  outputs, :class:`~double_backward.checker.model.calls.EmbeddingOutput`), its squared norm,
  then the backward to it and the parameters (through the lookup to the embedding table
  too). A :class:`Target` runs it as ``"inputs"`` with those leaves as its inputs.

:func:`penalty` runs it (an error is a break of kind ``"raises"``). :func:`second_derivative`
compares ``uᵀ J v`` (``J`` the derivative of that gradient with respect to the leaves the
penalty differentiates, ``u`` and ``v`` random directions) computed by autograd with central
differences of the gradient along ``v``; the step is chosen per direction and kink crossings
are refused (:mod:`~double_backward.checker.shared.finite_differences`). A direction that cannot
decide is replaced by another (the inputs alone, the parameters alone); when none decides,
the outcome says so: never a pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ..shared.finite_differences import TOLERANCE, central_difference
from .calls import State, Widen, fresh, tensors

#: What a penalty differentiates (first) and what its backward reaches (second), by ``wrt``.
WRT = ("inputs", "parameters", "both", "embeddings")
PENALTIES = {
    "inputs": "R1 / WGAN-GP: the gradient with respect to the inputs (create_graph=True), "
    "its squared norm, then the backward to the inputs and the parameters",
    "parameters": "MAML: the gradient with respect to the parameters (create_graph=True), "
    "its squared norm, then the backward to the parameters",
    "both": "the gradient with respect to the inputs and the parameters "
    "(create_graph=True), its squared norm, then the backward to both",
    "embeddings": "on the embeddings: the gradient with respect to the output of the "
    "model's input embedding (create_graph=True), its squared norm, then the backward to "
    "it and the parameters",
}
#: The steps tried in float64, relative to each leaf's size: finite differences' own sweep
#: carried on to 1e-10, since a whole model can be far more curved than one op (BatchNorm
#: over 2 values in EfficientNet-B0 at batch 2 is near-linear only below 1e-9); where rounding
#: swamps a step, the sweep stops by itself.
STEPS_FLOAT64 = (1e-2, 3e-3, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10)
#: How much larger than finite differences' own tolerance a disagreement must be to count.
MARGIN = 10.0


class NotDifferentiable(Exception):
    """Calling the model failed, or nothing it returns depends on what is differentiated."""


class Target:
    """A callable with the leaves it is differentiated by, called the same way every time:
    its buffers restored, the same random numbers, fresh copies of its non-tensor arguments."""

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        inputs: list[torch.Tensor],
        parameters: list[torch.Tensor],
        wrt: str,
        state: State,
        device: torch.device,
        widen: bool = False,
        squared: bool = False,
        context: Callable[[], contextlib.AbstractContextManager] | None = None,
        scales: dict[int, float] | None = None,
    ) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.inputs, self.parameters, self.wrt = inputs, parameters, wrt
        self.state, self.device = state, device
        self.widen = Widen() if widen else None
        self.first = {"inputs": inputs, "parameters": parameters}.get(
            wrt, [*inputs, *parameters]
        )
        self.second = parameters if wrt == "parameters" else [*inputs, *parameters]
        self.weights: list[torch.Tensor] | None = None
        # A submodule alone: its outputs' squares are added to the loss, so that its backward
        # is differentiated as after the nonlinear layers that follow it in the model (a
        # linear op's backward is otherwise never differentiated with respect to its input).
        self.squared = squared
        # Entered around every call (the hooks that add the embeddings' leaves), and the
        # size of a leaf whose own values do not say it (a zero leaf added to embeddings).
        self.context = context or contextlib.nullcontext
        self.scales = scales or {}
        # What the report calls ``inputs`` (the directions finite differences move along).
        self.inputs_name = "the inputs"
        # wrt="embeddings": the modules whose outputs the inputs are added to.
        self.embedded: list[str] = []

    def outputs(self) -> list[torch.Tensor]:
        """The floating outputs that require grad, from one call."""
        self.state.restore()
        with torch.random.fork_rng(devices=_rng_devices(self.device)):
            torch.manual_seed(0)
            try:
                with self.context():
                    if self.widen is not None:
                        with self.widen:
                            out = self.fn(*fresh(self.args), **fresh(self.kwargs))
                    else:
                        out = self.fn(*fresh(self.args), **fresh(self.kwargs))
            except Exception as error:  # noqa: BLE001 - the forward failing is not a break
                raise NotDifferentiable(
                    f"calling the model raised {first_line(error)}"
                ) from error
        found = [t for t in tensors(out) if t.is_floating_point() and t.requires_grad]
        if not found:
            raise NotDifferentiable(
                "no floating-point output depends on what is differentiated"
            )
        return found

    def loss(self) -> torch.Tensor:
        """A fixed random weighting of the outputs: the loss the penalty is taken of."""
        outputs = self.outputs()
        if self.weights is None:
            generator = torch.Generator(device="cpu").manual_seed(1)
            self.weights = [
                torch.randn(
                    t.shape, generator=generator, dtype=torch.float64, device="cpu"
                ).to(device=t.device, dtype=t.dtype)
                for t in outputs
            ]
        return sum(  # type: ignore[return-value]
            (w * t).sum() + ((t * t).sum() / 2 if self.squared else 0)
            for w, t in zip(self.weights, outputs, strict=True)
        )

    def gradient(self, create_graph: bool) -> list[torch.Tensor]:
        """The gradient of :meth:`loss` with respect to ``first`` (zeros where unused)."""
        if self.widen is not None:
            with self.widen:
                grads = torch.autograd.grad(
                    self.loss(),
                    self.first,
                    create_graph=create_graph,
                    allow_unused=True,
                )
        else:
            grads = torch.autograd.grad(
                self.loss(), self.first, create_graph=create_graph, allow_unused=True
            )
        return [
            torch.zeros_like(leaf) if g is None else g
            for g, leaf in zip(grads, self.first, strict=True)
        ]


def _rng_devices(device: torch.device) -> list:
    return [device] if device.type == "cuda" else []


def first_line(error: BaseException) -> str:
    """``Type: the first line of the message``."""
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0].rstrip(',')}"


@dataclasses.dataclass
class Outcome:
    """``kind``: None (works), ``"raises"``, ``"silent"`` or ``"undecided"``; ``message``
    says what was seen; ``checked`` what was compared."""

    kind: str | None
    message: str = ""
    checked: str = ""


def penalty(target: Target) -> Outcome:
    """The gradient penalty: the create_graph gradient, squared, summed, differentiated."""
    try:
        grads = target.gradient(create_graph=True)
    except NotDifferentiable:
        raise
    except RuntimeError as error:
        return Outcome("raises", first_line(error))
    graph = [g for g in grads if g.requires_grad]
    if not graph:
        return Outcome(
            None
        )  # no graph: the second-derivative check says whether that is right
    total = sum((g**2).sum() for g in graph)
    try:
        torch.autograd.grad(total, target.second, allow_unused=True)
    except RuntimeError as error:
        return Outcome("raises", first_line(error))
    return Outcome(None)


def _directions(target: Target) -> list[tuple[str, list[bool], int]]:
    """(name, which of ``second`` move, seed): all of them, then the inputs alone, then the
    parameters alone (a zero-initialised layer can put the point on a ReLU kink along any
    direction that moves it), then all of them again."""
    inputs = {id(t) for t in target.inputs}
    is_input = [id(t) in inputs for t in target.second]
    both = f"{target.inputs_name} and parameters"
    candidates = [(both, [True] * len(is_input), 2)]
    if any(is_input) and not all(is_input):
        candidates += [
            (f"{target.inputs_name} alone", is_input, 3),
            ("the parameters alone", [not i for i in is_input], 4),
        ]
    candidates.append((both, [True] * len(is_input), 5))
    return candidates


def second_derivative(target: Target, dtype: torch.dtype) -> Outcome:
    """``uᵀ J v`` by autograd against central differences, along directions until one decides.

    ``dtype`` is the precision the comparison can trust (float32 where float32 islands remain
    in a float64 check): it sets the steps and the tolerance.
    """
    tolerance = MARGIN * TOLERANCE[dtype]
    reasons: list[str] = []
    for name, moving, seed in _directions(target):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        u = [_signs(g, generator, target.device) for g in target.first]
        v = [
            _signs(leaf, generator, target.device)
            * target.scales.get(id(leaf), _scale(leaf))
            * float(move)
            for leaf, move in zip(target.second, moving, strict=True)
        ]
        grads = target.gradient(create_graph=True)
        product = sum((g * w).sum() for g, w in zip(grads, u, strict=True))
        analytic = 0.0
        if isinstance(product, torch.Tensor) and product.requires_grad:
            jt_u = torch.autograd.grad(product, target.second, allow_unused=True)
            analytic = float(
                sum(
                    (j * d).sum() for j, d in zip(jt_u, v, strict=True) if j is not None
                )
            )

        def along(t: float, v: list[torch.Tensor] = v) -> torch.Tensor:
            with torch.no_grad():
                for leaf, d in zip(target.second, v, strict=True):
                    leaf.add_(t * d)
            try:
                grads = target.gradient(create_graph=False)
            finally:
                with torch.no_grad():
                    for leaf, d in zip(target.second, v, strict=True):
                        leaf.sub_(t * d)
            return torch.cat([g.detach().reshape(-1).to(torch.float64) for g in grads])

        try:
            difference = central_difference(
                along,
                dtype=dtype,
                steps=STEPS_FLOAT64 if dtype == torch.float64 else None,
            )
        except (RuntimeError, NotDifferentiable) as error:  # at every shifted point
            reasons.append(f"along {name}: the gradient raised {first_line(error)}")
            continue
        if not difference.decided or difference.value is None:
            reasons.append(f"along {name}: {difference.reason}")
            continue
        jv = difference.value
        numeric = float((torch.cat([w.reshape(-1) for w in u]).to(jv) * jv).sum())
        scale = max(float(torch.linalg.vector_norm(jv)), abs(analytic), 1e-30)
        error = abs(analytic - numeric) / scale
        # No error or step printed for a pass: rounding noise would flip their digits
        # between machines, and the verdict is the tolerance.
        checked = f"along {name}: agrees within the relative tolerance {tolerance:.0e}"
        if error > tolerance:
            return Outcome(
                "silent",
                "the second derivative differs from central differences of the gradient "
                f"by {error:.2g} relative to its size (tolerance {tolerance:.0e}), "
                f"along {name}, with no error raised",
                checked,
            )
        return Outcome(None, checked=checked)
    return Outcome("undecided", "; ".join(reasons))


def _signs(like: torch.Tensor, generator: torch.Generator, device: torch.device
           ) -> torch.Tensor:  # fmt: skip
    drawn = torch.randint(0, 2, like.shape, generator=generator, device="cpu") * 2 - 1
    return drawn.to(device=device, dtype=like.dtype)


def _scale(leaf: torch.Tensor) -> float:
    """A move of t = 1 changes the leaf by about its own size (1 for a leaf of zeros)."""
    with torch.no_grad():
        size = float(leaf.detach().abs().mean()) if leaf.numel() else 0.0
    return size if size > 0 else 1.0


def check(target: Target, *, second: bool, dtype: torch.dtype) -> Outcome:
    """The penalty, then (``second``) the second derivative against finite differences."""
    outcome = penalty(target)
    if outcome.kind or not second:
        return outcome
    return second_derivative(target, dtype)


__all__ = [
    "PENALTIES", "WRT", "NotDifferentiable", "Outcome", "Target", "check", "first_line",
    "penalty", "second_derivative",
]  # fmt: skip
