"""What real use feeds a backward that the value checks do not: odd layouts, missing and batched
incoming gradients, at first order (backward) and second order (the backward of backward).

The value checks (:mod:`~double_backward.checker.function.evidence`) feed contiguous, defined
incoming gradients one at a time. A model feeds others:

- **layouts**: a transpose downstream (``y.t()``) hands backward a transposed gradient, a sum
  over a dimension (``y.sum(0)``) an expanded one (stride 0): ``grad.view(-1)`` raises on
  both. Each is compared with the same values, contiguous.
- **missing gradients**: a loss that uses one output of several leaves the others without a
  gradient (``None`` in backward under ``ctx.set_materialize_grads(False)``), and a gradient
  penalty on one input's gradient leaves the others' undifferentiated. Each gradient is left
  out in turn (no error, and the results add up as with zeros there), then all of them, which
  must give zero: what torch's gradcheck runs as ``check_undefined_grad``.
- **batched gradients**: ``torch.autograd.grad(..., is_grads_batched=True)`` (what gradcheck's
  ``check_batched_grad`` runs) feeds backward a batch under vmap, where ``.item()`` and a
  branch on a tensor's value cannot run; compared with one at a time. Not needed by double
  backward itself: a note, like :mod:`torch.func` support, and a problem only when asked for
  (``require_batched_grad=True``). :func:`torch.func.jacrev` and :func:`~torch.func.hessian`
  batch through :func:`torch.func.vmap` instead (and a Function's own vmap rule): probed
  with the other :mod:`torch.func` transforms.

Cost: at your inputs only, one forward per order shared by every mode, a few backwards
each; the incoming gradients are cheap fixed patterns (no random draw of the whole size), and
each result is reduced at once to its norm and one inner product (no result outlives its
comparison). At 1e6 elements this adds well under a fifth of the check's time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..shared.report import Problem, Report
from .calling import Call, _as_real, dot, quietly
from .evidence import Failed, Settings, _short, message

# torch.func batches incoming gradients its own way (its vmap, a Function's vmap rule).
TORCH_FUNC = {1: "jacrev (vmap over vjp)", 2: "hessian (vmap over vjp of grad)"}
_UNDEFINED = getattr(torch._C._functions, "UndefinedGrad", None)  # what gradcheck uses


class _Reused(Exception):
    """A second backward through the same graph failed where a first one passed: the
    Function's own state, not the mode, is the cause (reported by the other checks)."""


def check_modes(call: Call, inputs: tuple[torch.Tensor, ...], s: Settings, report: Report,
                require_batched_grad: bool) -> None:  # fmt: skip
    """Feed each mode at orders 1 and 2; results, problems and notes go into ``report``."""
    found: dict[str, list[str]] = {"layouts": [], "missing": [], "batched": []}
    checked: dict[int, list[str]] = {1: [], 2: []}
    batched: dict[int, str] = {}
    for order, stage in ((1, _first_order_stage), (2, _second_order_stage)):
        try:
            prepared = stage(call, inputs)
        except Exception as error:  # noqa: BLE001 - the value checks passed: not this mode's
            report.notes.append(f"incoming-gradient modes at order {order} not run: "
                                f"{message(error, 160)}")  # fmt: skip
            continue
        if prepared is not None:
            _feed(order, *prepared, s.rtol, found, checked, batched)
        del prepared  # this order's graph, before the next order builds its own
    _report(report, found, checked, batched, require_batched_grad)
    # Without reverse mode in torch.func, jacrev and hessian fail for the same reason.
    if report.torch_func.get("vjp (reverse mode)") == "works":
        report.torch_func.update(_torch_func_batched(call, inputs))


def _feed(order: int, base: Backward, v: list[Incoming], labels: list[str], tol: float,
          found: dict[str, list[str]], checked: dict[int, list[str]],
          batched: dict[int, str]) -> None:  # fmt: skip
    """Each mode at one order, against the result for contiguous incoming gradients."""
    want, error = _attempt(base, [c for c, _ in v])
    if error is not None:  # the value checks passed: a second backward is the cause
        return
    for mode, fails in (("layouts", _layouts), ("missing", _missing)):
        try:
            seen, what = fails(base, v, labels, tol, want)
        except _Reused:
            return
        checked[order] += what
        if seen:
            found[mode].append(f"order {order}, {seen}")
    try:
        seen = _batched(base, v, tol, want)
    except _Reused:
        return
    batched[order] = "works" if seen is None else f"not supported ({seen})"
    if seen is not None:
        found["batched"].append(f"order {order}: {seen}")


# -- the incoming gradients of each order ---------------------------------------------------

# A result's norm and its inner product with a fixed signed vector: any change of its values
# or of their order shows in one of them.
Fingerprint = tuple[float, float]
Backward = Callable[..., list[Fingerprint | None]]
# An incoming gradient: contiguous, and the same values expanded.
Incoming = tuple[torch.Tensor, torch.Tensor]


def _first_order_stage(call: Call, inputs: Sequence[torch.Tensor]
                       ) -> tuple[Backward, list[Incoming], list[str]]:  # fmt: skip
    """Backward: the Function's outputs fed to autograd with incoming gradients v."""
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    with torch.enable_grad():
        outputs = list(quietly(lambda: call(*leaves)))
    v = [_pattern(o, k) for k, o in enumerate(outputs)]
    return _backward_of(outputs, leaves), v, [f"output {i}" for i in call.kept]


def _second_order_stage(call: Call, inputs: Sequence[torch.Tensor]
                        ) -> tuple[Backward, list[Incoming], list[str]] | None:  # fmt: skip
    """The backward of backward: the gradients (built with an incoming gradient that requires
    grad, as in a gradient penalty) fed to autograd with incoming gradients u."""
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    with torch.enable_grad():
        outputs = quietly(lambda: call(*leaves))
        incoming = [_pattern(o, k)[0].requires_grad_() for k, o in enumerate(outputs)]
        grads = quietly(lambda: torch.autograd.grad(
            outputs, leaves, incoming, create_graph=True, allow_unused=True))  # fmt: skip
    kept = [j for j, g in enumerate(grads) if g is not None and g.requires_grad]
    if not kept:
        return None  # a constant gradient: no backward of backward to feed
    differentiable = [grads[j] for j in kept]
    u = [_pattern(g, 7 + k) for k, g in enumerate(differentiable)]
    labels = [f"the gradient with respect to {call.label(call.slots[j])}" for j in kept]
    return _backward_of(differentiable, [*leaves, *incoming]), u, labels


def _pattern(like: torch.Tensor, number: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An incoming gradient shaped like ``like``: contiguous, and the same values expanded
    (stride 0 along the first dimension of size above 1, as a sum over it downstream gives;
    a scalar repeated for a vector). Signed values of a Weyl sequence (distinct, cheap: no
    random draw of the whole size)."""
    shape = like.shape
    dim = next((d for d, size in enumerate(shape) if size > 1), None)
    if dim is None:  # one element: every layout is the same
        small = shape
    elif like.dim() == 1:
        small = torch.Size((1,))
    else:
        small = torch.Size((*shape[:dim], 1, *shape[dim + 1 :]))
    count = small.numel()
    real = like.dtype.to_real() if like.is_complex() else like.dtype
    steps = torch.arange(count, dtype=torch.float64, device=like.device)
    values = (steps * 0.6180339887498949 + 0.1 * number + 0.05).frac_().sub_(0.5)
    if like.is_complex():
        imaginary = (steps * 0.7548776662466927 + 0.3).frac_().sub_(0.5)
        values = torch.complex(values, imaginary)
    values = values.to(like.dtype if like.is_complex() else real).reshape(small)
    expanded = values.expand(shape)
    return expanded.contiguous(), expanded


def _backward_of(
    outputs: Sequence[torch.Tensor], wrt: Sequence[torch.Tensor]
) -> Backward:
    """autograd.grad of ``outputs`` (those whose incoming gradient is not None) with respect
    to ``wrt``, the graph kept for the next call; each result's fingerprint (None where
    there is none), so that no result outlives its comparison."""
    projections: dict[tuple, torch.Tensor] = {}

    def fingerprint(g: torch.Tensor | None) -> Fingerprint | None:
        if g is None:
            return None
        flat = _as_real(g.detach()).reshape(-1)
        key = (flat.numel(), flat.dtype, flat.device)
        if key not in projections:  # signed values of size about 1, fixed per position
            steps = torch.arange(flat.numel(), dtype=torch.float64, device=flat.device)
            projections[key] = (
                (steps * 0.5698402909980532).frac_().sub_(0.5).to(flat.dtype)
            )
        return float(torch.linalg.vector_norm(flat)), float(
            torch.dot(flat, projections[key])
        )

    def backward(v: Sequence[torch.Tensor | None], batched: bool = False,
                 undefined: bool = False) -> list[Fingerprint | None]:  # fmt: skip
        fed = [(o, g) for o, g in zip(outputs, v, strict=True) if g is not None]
        if undefined:  # every incoming gradient undefined, as gradcheck does it
            fed = [(_UNDEFINED()(o), torch.zeros_like(o)) for o in outputs]  # type: ignore[misc]
        with torch.enable_grad():
            got = quietly(lambda: torch.autograd.grad(
                [o for o, _ in fed], wrt, [g for _, g in fed], retain_graph=True,
                allow_unused=True, is_grads_batched=batched,
            ))  # fmt: skip
        if batched:  # a batch of one
            return [None if g is None else fingerprint(g[0]) for g in got]
        return [fingerprint(g) for g in got]

    return backward


# -- the modes ------------------------------------------------------------------------------


def _difference(got: Sequence[Fingerprint | None], want: Sequence[Fingerprint | None]
                ) -> float:  # fmt: skip
    """How far ``got`` is from ``want``, relative to ``want``'s size (None counts as zero;
    0 when both are zero)."""
    squared, scale = 0.0, 0.0
    for g, w in zip(got, want, strict=True):
        g, w = g or (0.0, 0.0), w or (0.0, 0.0)
        squared += (g[0] - w[0]) ** 2 + (g[1] - w[1]) ** 2
        scale += w[0] ** 2
    if squared == 0:
        return 0.0
    return squared**0.5 / scale**0.5 if scale else float("inf")


def _attempt(backward: Backward, *args: object, **kwargs: bool
             ) -> tuple[list[Fingerprint | None] | None, BaseException | None]:  # fmt: skip
    try:
        return backward(*args, **kwargs), None
    except Exception as error:  # noqa: BLE001 - the error is the finding
        return None, error


def _raised(base: Backward, v: Sequence[torch.Tensor], error: BaseException) -> str:
    """The finding of a call that raised, unless a plain call raises now too."""
    if _attempt(base, v)[1] is not None:
        raise _Reused from error
    return f"raised {message(error, 200)}"


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in the memory layout a transpose downstream gives (the last two
    dimensions swapped in memory), or every other element of a wider tensor (a vector, or
    a last dimension of size 1)."""
    if t.dim() >= 2:
        odd = t.mT.contiguous().mT
        if not odd.is_contiguous():
            return odd
    odd = t.new_zeros((*t.shape, 2))[..., 0]
    odd.copy_(t)
    return odd


def _layouts(base: Backward, v: list[Incoming], labels: list[str], tol: float,
             want: list[Fingerprint | None]) -> tuple[str | None, list[str]]:  # fmt: skip
    """The same incoming gradients transposed, then expanded: the same result, no error."""
    contiguous = [c for c, _ in v]
    if all(c.numel() <= 1 for c in contiguous):
        return None, []  # one element: every layout is contiguous
    layouts = {
        "transposed": [_transposed(c) if c.numel() > 1 else c for c in contiguous],
        "expanded": [e for _, e in v],
    }
    for name, odd in layouts.items():
        got, error = _attempt(base, odd)
        if error is not None:
            return f"a {name} incoming gradient: {_raised(base, contiguous, error)}", []
        difference = _difference(got, want)
        if difference > tol:
            return (f"a {name} incoming gradient: the result differs from the one for the "
                    f"same values, contiguous, by {difference:.2g} (relative)"), []  # fmt: skip
    return None, list(layouts)


def _missing(base: Backward, v: list[Incoming], labels: list[str], tol: float,
             want: list[Fingerprint | None]) -> tuple[str | None, list[str]]:  # fmt: skip
    """Each incoming gradient left out in turn (as by a loss that does not use that output):
    no error, and results that add up as with zeros there (backward is linear in its incoming
    gradients, so with n of them the n results add up to n - 1 times the full one, compared
    through the fingerprints' inner products); then all undefined, which must give zero
    (gradcheck's check_undefined_grad)."""
    contiguous = [c for c, _ in v]
    if len(v) > 1:
        total = 0.0
        for k in range(len(v)):
            got, error = _attempt(
                base, [None if i == k else c for i, c in enumerate(contiguous)]
            )
            if error is not None:
                return (f"no incoming gradient for {labels[k]}: "
                        f"{_raised(base, contiguous, error)}"), []  # fmt: skip
            total += sum(g[1] for g in got if g is not None)  # type: ignore[union-attr]
        expected = (len(v) - 1) * sum(w[1] for w in want if w is not None)
        scale = (len(v) - 1) * sum(w[0] ** 2 for w in want if w is not None) ** 0.5
        difference = abs(total - expected) / scale if scale else abs(total)
        if difference > tol:
            return (
                "one incoming gradient left out at a time: the results differ from those "
                f"with a zero gradient there by {difference:.2g} (relative)"
            ), []
    if _UNDEFINED is None:
        return None, ["missing"] if len(v) > 1 else []
    got, error = _attempt(base, contiguous, undefined=True)
    if error is not None:
        return f"no incoming gradient at all: {_raised(base, contiguous, error)}", []
    if any(g is not None and g[0] > 0 for g in got):  # type: ignore[union-attr]
        return "no incoming gradient at all: the result is not zero", []
    return None, ["missing"]


def _batched(base: Backward, v: list[Incoming], tol: float,
             want: list[Fingerprint | None]) -> str | None:  # fmt: skip
    """The incoming gradients as a batch of one (vmap: .item() or a branch on a value fails
    whatever the batch size; one keeps the memory of one backward), against one at a
    time."""
    got, error = _attempt(base, [c.unsqueeze(0) for c, _ in v], batched=True)
    if error is not None:
        return _raised(base, [c for c, _ in v], error).removeprefix("raised ")
    difference = _difference(got, want)  # type: ignore[arg-type]
    if difference > tol:
        return (f"the batched result differs from the gradients one at a time by "
                f"{difference:.2g} (relative)")  # fmt: skip
    return None


def _torch_func_batched(call: Call, inputs: Sequence[torch.Tensor]) -> dict[str, str]:
    """jacrev's and hessian's way of batching: torch.func.vmap over a vjp, of the Function
    and of its gradient, for two cotangents at once (not a whole Jacobian)."""
    detached = tuple(x.detach() for x in inputs)
    with torch.no_grad():
        outputs = call(*detached)
    weights = [_pattern(o, k)[0] for k, o in enumerate(outputs)]
    argnums = tuple(range(len(detached)))

    def scalar(*xs: torch.Tensor) -> torch.Tensor:
        return dot(call(*xs), weights)

    def batched_vjp(fn: Callable[..., object], like: Sequence[torch.Tensor]) -> None:
        _, vjp = torch.func.vjp(fn, *detached)
        cotangents = tuple(
            torch.stack([c, -c]) for c in (_pattern(t, 3)[0] for t in like)
        )
        torch.func.vmap(vjp)(cotangents)

    probes = {
        1: lambda: batched_vjp(lambda *xs: tuple(call(*xs)), outputs),
        2: lambda: batched_vjp(torch.func.grad(scalar, argnums), detached),
    }
    results = {}
    for order, probe in probes.items():
        try:
            quietly(probe)
        except Exception as error:  # noqa: BLE001
            results[TORCH_FUNC[order]] = f"not supported ({_short(error)})"
        else:
            results[TORCH_FUNC[order]] = "works"
    return results


# -- the report -----------------------------------------------------------------------------

_LAYOUT_FIX = (
    "The usual cause is .view() on the incoming gradient (or on a tensor made from it), "
    "which needs strides it can reinterpret, or code that reads the memory as if it were "
    "contiguous (a C++/CUDA kernel given data_ptr()). Use .reshape() instead of .view(), or "
    "make it contiguous first (grad = grad.contiguous())."
)
_MISSING_FIX = (
    "With ctx.set_materialize_grads(False) an output that the loss does not use (or whose "
    "gradient no later operation defines) reaches backward as None, and arithmetic on None "
    "raises. Test each incoming gradient (if grad is None: skip its term) and return None, "
    "or a zero, for what gets no contribution; or leave set_materialize_grads on (the "
    "default), and autograd passes zeros."
)
_BATCHED_FIX = (
    "The usual cause is Python control flow on a tensor's value (if grad.abs().sum() == 0:), "
    ".item(), .tolist() or NumPy on a tensor made from the incoming gradient: under vmap it "
    "holds several gradients at once and has no single value. Keep it in tensor operations "
    "(torch.where(cond, a, b) instead of if, a tensor instead of .item())."
)


def _where(seen: list[str]) -> str:
    orders = sorted({entry[len("order ")] for entry in seen})
    if orders == ["1"]:
        return "backward"
    if orders == ["2"]:
        return "the backward of backward (what a gradient penalty differentiates)"
    return "backward and the backward of backward"


def _missing_problem(seen: list[str]) -> Problem:
    return Problem("missing-incoming-gradient", (
        f"{_where(seen)} fails when some incoming gradients are missing: a loss that uses "
        "one output of several, or a gradient penalty on one input's gradient alone (what "
        f"gradcheck's check_undefined_grad runs). {_MISSING_FIX} Seen: {'; '.join(seen)}."
    ), "check")  # fmt: skip


def named_by_error(failure: Failed, order: int, where: str) -> Problem | None:
    """The missing-gradient problem, when a value check raised on None: gradcheck's and
    gradgradcheck's Jacobians feed one incoming gradient at a time, the others undefined."""
    if failure.kind != "raised" or "'NoneType'" not in failure.text:
        return None
    return _missing_problem([f"order {order}, {where}: {failure.text.rstrip('.')}"])


def _passed(checked: dict[int, list[str]], batched: dict[int, str]) -> str:
    done = {order: [*what, *(["batched"] if batched.get(order) == "works" else [])]
            for order, what in checked.items()}  # fmt: skip
    if done[1] == done[2]:
        text = f"passed: {', '.join(done[1])} (orders 1, 2)"
    else:
        text = "passed: " + "; ".join(f"order {order}: {', '.join(what)}"
                                      for order, what in done.items() if what)  # fmt: skip
    failed = [order for order, result in batched.items() if result != "works"]
    return text + ("; batched: see note" if failed else "")


def _report(report: Report, found: dict[str, list[str]], checked: dict[int, list[str]],
            batched: dict[int, str], require_batched_grad: bool) -> None:  # fmt: skip
    if found["layouts"] or found["missing"]:
        report.results["incoming grads"] = "FAILED"
    elif checked[1] or checked[2] or batched:
        report.results["incoming grads"] = _passed(checked, batched)
    if found["batched"] and require_batched_grad:
        report.results["incoming grads"] = "FAILED"
    if found["layouts"]:
        report.problems.append(Problem("incoming-gradient-layout", (
            f"{_where(found['layouts'])} fails when its incoming gradient is not contiguous: "
            "a transpose downstream (y.t(), or a penalty on grad.t()) gives it a transposed "
            "gradient, a sum over a dimension (y.sum(0)) an expanded one (stride 0), as the "
            f"first real model does. {_LAYOUT_FIX} Seen: {'; '.join(found['layouts'])}."
        ), "check"))  # fmt: skip
    if found["missing"]:
        report.problems.append(_missing_problem(found["missing"]))
    if not found["batched"]:
        return
    what = (
        f"{_where(found['batched'])} cannot run on batched incoming gradients: "
        "torch.autograd.grad(..., is_grads_batched=True) fails on it, and so do gradcheck's "
        "check_batched_grad and torch.autograd.functional.jacobian and hessian with "
        "vectorize=True, which run it (torch.func.jacrev and hessian batch through "
        "torch.func.vmap instead: shown with the torch.func support). "
    )
    seen = f"Seen: {'; '.join(found['batched'])}."
    if require_batched_grad:
        report.problems.append(Problem("batched-incoming-gradient", (
            f"{what}{_BATCHED_FIX} {seen}"), "compatibility"))  # fmt: skip
    else:
        report.notes.append(
            f"{what}Double backward itself does not need it; check(..., "
            f"require_batched_grad=True) (--require-batched-grad) makes this a problem. "
            f"{_BATCHED_FIX} {seen}"
        )
