"""The evidence: each check the verdict rests on, at a point and in random directions.

Two kinds of check, for every order:

- torch's :func:`~torch.autograd.gradcheck` and :func:`~torch.autograd.gradgradcheck`, which
  build Jacobians: run only while the Jacobians are small (full mode up to
  ``FULL_MODE_UP_TO`` elements, fast mode while inputs x (inputs + outputs) stays under
  ``JACOBIAN_ENTRIES``), so a failure never makes torch build a Jacobian that does not fit;
- checks along random *signed* directions, each costing a few calls of the Function, so they
  run at every size: the vector-Jacobian product with a random incoming gradient against
  central differences, backward's linearity in the incoming gradient, and the Hessian-vector
  product (and the mixed term, through the incoming gradient) against central differences of
  the gradient. Central differences are taken at two steps, ``h`` and ``h/2``: where they
  disagree the function is not smooth there (a kink crossed), and that element or direction
  is left out.

With ``surrogate_gradient=True`` the first derivative is taken as given: the second-order
checks compare the derivative of *your backward* with central differences of your backward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck

from .calling import Call, dot, norm, quietly

FULL_MODE_UP_TO = 100  # elements of the differentiated inputs, all together
JACOBIAN_ENTRIES = 1_000_000  # the largest Jacobian torch may build (8 MB in float64)
# gradcheck's tolerances per dtype: float32's finite differences need a larger step.
TOLERANCES = {
    torch.float64: {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3},
    torch.float32: {"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2},
    torch.float16: {"eps": 1e-2, "atol": 1e-1, "rtol": 1e-1},
    torch.bfloat16: {"eps": 1e-2, "atol": 1e-1, "rtol": 1e-1},
}
# Directional checks: relative step of the central differences and the relative error
# above which a direction fails. float64's 1e-3 gives the detection bound on plot_16.
DIRECTIONAL = {
    torch.float64: {"step": 1e-6, "rtol": 1e-3},
    torch.float32: {"step": 1e-3, "rtol": 2e-2},
    torch.float16: {"step": 1e-2, "rtol": 2e-1},
    torch.bfloat16: {"step": 1e-2, "rtol": 2e-1},
}
# A direction whose central differences at h and h/2 disagree on more than this share of the
# elements crosses a kink: it is inconclusive, and another is drawn.
NON_SMOOTH_SHARE = 0.1


class Failed(Exception):
    """A check failed: ``kind`` is "mismatch", "raised" or "nonlinear"; ``text`` says what."""

    def __init__(self, kind: str, text: str, error: BaseException | None = None):
        super().__init__(text)
        self.kind = kind
        self.text = text if error is None else f"{text} {message(error)}"
        self.error = error

    def __str__(self) -> str:
        return self.text


def message(error: BaseException, limit: int = 300) -> str:
    """The error's type and its message (first lines), enough to recognise and search it."""
    text = str(error).strip()
    if isinstance(error, GradcheckError):  # keep the sentence, not the Jacobians it prints
        text = text.split(",\nnumerical")[0].split("\n")[0]
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclasses.dataclass
class Settings:
    """How hard to look: tolerances, number of directions, which gradcheck mode."""

    dtype: torch.dtype
    directions: int
    gradcheck_mode: str  # "full", "fast" or "none" (too large for a Jacobian)
    generator: torch.Generator
    surrogate_gradient: bool = False

    @property
    def tol(self) -> dict[str, float]:
        return TOLERANCES[self.dtype]

    @property
    def rtol(self) -> float:
        return DIRECTIONAL[self.dtype]["rtol"]


def gradcheck_mode(numel_in: int, numel_out: int, fast_mode: bool | None) -> str:
    """full, fast or none: never a Jacobian larger than ``JACOBIAN_ENTRIES`` unless asked."""
    if fast_mode is not None:
        return "fast" if fast_mode else "full"
    if numel_in <= FULL_MODE_UP_TO:
        return "full"
    return "fast" if numel_in * (numel_in + numel_out) <= JACOBIAN_ENTRIES else "none"


def _run(compute: Callable[[], object], what: str) -> None:
    """Run a check of torch's; its failure becomes :class:`Failed`."""
    try:
        quietly(compute)
    except GradcheckError as error:
        raise Failed("mismatch", f"{what}:", error) from error
    except Exception as error:  # noqa: BLE001 - anything the Function raises is reported
        raise Failed("raised", f"{what} raised", error) from error


# -- the checks of one order at one point -----------------------------------------------


def first_order(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> str:
    """gradcheck (when small), linearity in the incoming gradient, signed directions."""
    done = []
    if s.surrogate_gradient:  # the first derivative is taken as given: linearity only
        linearity(call, at, s)
        return "passed: linear in grad_out (surrogate: not compared with forward)"
    if s.gradcheck_mode != "none":
        fast = s.gradcheck_mode == "fast"
        _run(lambda: gradcheck(call, at, **s.tol, fast_mode=fast), "gradcheck")
        done.append(f"gradcheck {s.gradcheck_mode}")
    linearity(call, at, s)
    done.append("linear")
    worst = vjp_directions(call, at, s)
    done.append(f"VJP in {s.directions} directions (error {worst:.0e})")
    return "passed: " + ", ".join(done)


def second_order(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> str:
    """gradgradcheck (when small), then Hessian-vector products and mixed terms in
    directions."""
    done = []
    if s.gradcheck_mode != "none":
        fast = s.gradcheck_mode == "fast"
        _run(lambda: gradgradcheck(
            call, at, **s.tol, fast_mode=fast, gen_non_contig_grad_outputs=False,
            check_undefined_grad=False,
        ), "gradgradcheck")  # fmt: skip
        done.append(f"gradgradcheck {s.gradcheck_mode}")
    if s.surrogate_gradient:
        worst = backward_derivative_directions(call, at, s)
        done.append(f"backward's derivative, {s.directions} directions (error {worst:.0e})")
    else:
        worst = hvp_directions(call, at, s)
        done.append(f"HVP, mixed term in {s.directions} directions (error {worst:.0e})")
    return "passed: " + ", ".join(done)


# -- directions -------------------------------------------------------------------------


def _randn(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(like.shape, generator=generator, dtype=like.dtype)


def _step(at: Sequence[torch.Tensor], s: Settings) -> float:
    """The step of the central differences, relative to the inputs' magnitude."""
    rms = max(float(x.detach().abs().pow(2).mean()) ** 0.5 if x.numel() else 0.0 for x in at)
    return DIRECTIONAL[s.dtype]["step"] * max(1.0, rms)


def _leaves(at: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(x.detach().requires_grad_() for x in at)


def _shifted(at: Sequence[torch.Tensor], u: Sequence[torch.Tensor], t: float) -> tuple:
    return tuple(x.detach() + t * d for x, d in zip(at, u, strict=True))


def _outputs(call: Call, at: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return tuple(o.detach() for o in quietly(lambda: call(*at)))


def _grad(
    call: Call,
    at: Sequence[torch.Tensor],
    v: Sequence[torch.Tensor],
    create_graph: bool = False,
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """Backward at ``at`` with incoming gradient ``v``: (the leaves, their gradients)."""
    leaves = _leaves(at)
    with torch.enable_grad():
        outs = quietly(lambda: call(*leaves))
        grads = quietly(lambda: torch.autograd.grad(
            outs, leaves, v, create_graph=create_graph, allow_unused=True,
            materialize_grads=True,
        ))  # fmt: skip
    if not create_graph:  # a backward may build a graph of its own (a recompute)
        grads = tuple(g.detach() for g in grads)
    return leaves, grads


def _attempt(compute: Callable[[], Any], what: str) -> Any:
    try:
        return compute()
    except Failed:
        raise
    except Exception as error:  # noqa: BLE001 - the Function's error is the evidence
        raise Failed("raised", f"{what} raised", error) from error


def linearity(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> None:
    """backward(a v1 + b v2) against a backward(v1) + b backward(v2), a and b signed."""
    outs = _attempt(lambda: _outputs(call, at), "forward")
    for _ in range(s.directions):
        v1 = [_randn(o, s.generator) for o in outs]
        v2 = [_randn(o, s.generator) for o in outs]
        a, b = (float(c) for c in torch.randn(2, generator=s.generator, dtype=torch.float64))
        combined = [a * p + b * q for p, q in zip(v1, v2, strict=True)]
        g1, g2, g = (
            _attempt(lambda v=v: _grad(call, at, v)[1], "backward") for v in (v1, v2, combined)
        )
        expected = [a * p + b * q for p, q in zip(g1, g2, strict=True)]
        error = _relative(g, expected)
        if error > s.rtol:
            raise Failed("nonlinear", (
                f"backward(a*v1 + b*v2) differs from a*backward(v1) + b*backward(v2) by "
                f"{error:.2g} (relative), with random signed incoming gradients v1, v2 and "
                f"a={a:.2f}, b={b:.2f}."
            ))  # fmt: skip


def _relative(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    difference = norm([x - y for x, y in zip(a, b, strict=True)])
    scale = max(norm(a), norm(b))
    return difference / scale if scale > 0 else 0.0


def _central(phi: Callable[[float], Any], h: float) -> tuple[Any, Any]:
    """Central differences of ``phi`` at steps h and h/2 (scalars or lists of tensors)."""

    def difference(step: float) -> Any:
        plus, minus = phi(step), phi(-step)
        if isinstance(plus, torch.Tensor):
            return (plus - minus) / (2 * step)
        return [(p - m) / (2 * step) for p, m in zip(plus, minus, strict=True)]

    return difference(h), difference(h / 2)


def _scalar_error(analytic: float, fd: torch.Tensor, fd_half: torch.Tensor, scale: float,
                  s: Settings) -> float | None:
    """Relative error of a directional derivative; None when the function is not smooth
    along this direction."""  # fmt: skip
    fd_value, half = float(fd), float(fd_half)
    scale = max(scale + abs(fd_value), 1e-12)
    if abs(fd_value - half) > s.rtol * scale:
        return None
    return abs(analytic - fd_value) / scale


def _vector_error(analytic: Sequence[torch.Tensor], fd: Sequence[torch.Tensor],
                  fd_half: Sequence[torch.Tensor], s: Settings) -> float | None:
    """Relative error of a vector of derivatives, leaving out the elements where the central
    differences at h and h/2 disagree (a kink crossed); None when too many do."""  # fmt: skip
    kept_a, kept_fd, left_out, total = [], [], 0, 0
    typical = norm(analytic) / max(1, sum(a.numel() for a in analytic)) ** 0.5
    for a, d, d2 in zip(analytic, fd, fd_half, strict=True):
        smooth = (d - d2).abs() <= s.rtol * (d.abs() + d2.abs() + typical) + 1e-12
        left_out += int((~smooth).sum())
        total += smooth.numel()
        kept_a.append(torch.where(smooth, a, torch.zeros_like(a)))
        kept_fd.append(torch.where(smooth, d, torch.zeros_like(d)))
    if total and left_out > NON_SMOOTH_SHARE * total:
        return None
    return _relative(kept_a, kept_fd)


def _directions(check_one: Callable[[], float | None], s: Settings, what: str) -> float:
    """Run ``check_one`` in ``s.directions`` smooth directions; the worst error, or Failed."""
    errors: list[float] = []
    tries = 0
    while len(errors) < s.directions and tries < 3 * s.directions:
        tries += 1
        error = _attempt(check_one, what)
        if error is not None:
            errors.append(error)
    if not errors:
        return 0.0  # not smooth in any direction tried: gradcheck's evidence stands alone
    failing = [e for e in errors if e > s.rtol]
    if failing:
        raise Failed("mismatch", (
            f"{what}: relative error {max(failing):.2g} against central differences in "
            f"{len(failing)} of {len(errors)} random signed directions (tolerance "
            f"{s.rtol:g})."
        ))  # fmt: skip
    return max(errors)


def vjp_directions(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> float:
    """uᵀ(Jᵀv) from backward against the central difference of vᵀf along u."""
    outs = _attempt(lambda: _outputs(call, at), "forward")
    h = _step(at, s)

    def one() -> float | None:
        v = [_randn(o, s.generator) for o in outs]
        u = [_randn(x, s.generator) for x in at]
        _, g = _grad(call, at, v)
        fd, fd_half = _central(lambda t: dot(v, _outputs(call, _shifted(at, u, t))), h)
        return _scalar_error(float(dot(g, u)), fd, fd_half, norm(g), s)

    return _directions(one, s, "the first derivative (vector-Jacobian product)")


def hvp_directions(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> float:
    """With an incoming gradient v that requires grad, differentiate uᵀg(x, v) once more:
    its derivative in x (the Hessian-vector product of vᵀf) against central differences of
    g along u, and in v (the mixed term, J u) against central differences of f along u."""
    outs = _attempt(lambda: _outputs(call, at), "forward")
    h = _step(at, s)
    worst = 0.0

    def one() -> float | None:
        nonlocal worst
        v = [_randn(o, s.generator) for o in outs]
        u = [_randn(x, s.generator) for x in at]
        incoming = [w.clone().requires_grad_() for w in v]
        leaves, g = _grad(call, at, incoming, create_graph=True)
        with torch.enable_grad():
            total = dot(g, u)
            wrt = [*leaves, *incoming]
            if total.requires_grad:
                second = quietly(lambda: torch.autograd.grad(
                    total, wrt, allow_unused=True, materialize_grads=True))  # fmt: skip
            else:  # no graph at all: every second derivative is zero
                second = [torch.zeros_like(w) for w in wrt]
        hvp, mixed = second[: len(leaves)], second[len(leaves):]
        fd_g = _central(lambda t: _grad(call, _shifted(at, u, t), v)[1], h)
        fd_f = _central(lambda t: _outputs(call, _shifted(at, u, t)), h)
        errors = [_vector_error(hvp, *fd_g, s), _vector_error(mixed, *fd_f, s)]
        if None in errors:
            return None
        return max(errors)  # type: ignore[type-var]

    return _directions(one, s, "the second derivative (Hessian-vector product, mixed term)")


def backward_derivative_directions(call: Call, at: tuple[torch.Tensor, ...],
                                   s: Settings) -> float:
    """Surrogate gradients: the derivative of uᵀg(x, v), g your backward, in a random
    direction (p, q) of (x, v), against central differences of your backward."""  # fmt: skip
    outs = _attempt(lambda: _outputs(call, at), "forward")
    h = _step([*at, *outs], s)

    def one() -> float | None:
        v = [_randn(o, s.generator) for o in outs]
        u = [_randn(x, s.generator) for x in at]
        p = [_randn(x, s.generator) for x in at]
        q = [_randn(o, s.generator) for o in outs]
        incoming = [w.clone().requires_grad_() for w in v]
        leaves, g = _grad(call, at, incoming, create_graph=True)
        with torch.enable_grad():
            total = dot(g, u)
            wrt = [*leaves, *incoming]
            if total.requires_grad:
                second = quietly(lambda: torch.autograd.grad(
                    total, wrt, allow_unused=True, materialize_grads=True))  # fmt: skip
            else:
                second = [torch.zeros_like(w) for w in wrt]
        analytic = float(dot(second, [*p, *q]))

        def backward_along(t: float) -> torch.Tensor:
            shifted_v = [w + t * d for w, d in zip(v, q, strict=True)]
            return dot(_grad(call, _shifted(at, p, t), shifted_v)[1], u)

        fd, fd_half = _central(backward_along, h)
        return _scalar_error(analytic, fd, fd_half, norm(second), s)

    return _directions(one, s, "the derivative of backward")


# -- forward mode, third order, torch.func ---------------------------------------------------


def _short(error: BaseException) -> str:
    """The first sentence of the error, without torch's list of transforms."""
    text = message(error, 400).replace(" (vmap, grad, jvp, jacrev, ...)", "")
    return text.split(". ")[0]


def jvp_agreement(call: Call, inputs: tuple[torch.Tensor, ...],
                  weights: list[torch.Tensor], s: Settings) -> str:
    """The first derivative by forward mode against reverse mode: wᵀ(J t) from a jvp against
    (wᵀJ) t from backward, for random w and t."""  # fmt: skip
    detached = tuple(x.detach() for x in inputs)
    tangents = tuple(_randn(x, s.generator) for x in inputs)
    try:
        _, jvps = quietly(lambda: torch.func.jvp(call, detached, tangents))
    except Exception:  # noqa: BLE001
        return "skipped (no forward mode)"
    _, grads = _grad(call, inputs, weights)
    forward, reverse = float(dot(weights, jvps)), float(dot(grads, tangents))
    scale = norm(grads) + abs(reverse)
    return "agree" if abs(forward - reverse) <= s.tol["rtol"] * scale + 1e-12 else "DISAGREE"


def hvp_agreement(call: Call, inputs: tuple[torch.Tensor, ...],
                  weights: list[torch.Tensor], s: Settings) -> str:
    """Forward-over-reverse against reverse-over-reverse Hessian-vector products."""
    scalar = call.scalar(weights)
    vectors = tuple(_randn(x, s.generator) for x in inputs)
    detached = tuple(x.detach() for x in inputs)
    try:
        gradient = torch.func.grad(scalar, argnums=tuple(range(len(inputs))))
        forward = quietly(lambda: torch.func.jvp(gradient, detached, vectors)[1])
    except Exception:  # noqa: BLE001
        return "skipped (no forward mode)"
    leaves = _leaves(inputs)
    with torch.enable_grad():
        grads = torch.autograd.grad(scalar(*leaves), leaves, create_graph=True,
                                    allow_unused=True, materialize_grads=True)  # fmt: skip
        total = dot(grads, vectors)
        if total.requires_grad:
            reverse = torch.autograd.grad(total, leaves, allow_unused=True,
                                          materialize_grads=True)  # fmt: skip
        else:
            reverse = tuple(torch.zeros_like(x) for x in inputs)
    return "agree" if _relative(forward, reverse) <= s.tol["rtol"] else "DISAGREE"


def first_derivative(call: Call, weights: list[torch.Tensor]) -> Callable[..., Any]:
    """The gradient of a weighted sum of the outputs, as a function of the inputs."""
    scalar = call.scalar(weights)

    def first(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grads = torch.autograd.grad(
            scalar(*inputs), inputs, create_graph=True, allow_unused=True,
            materialize_grads=True,
        )  # fmt: skip
        # A gradient with no graph is constant: its derivatives are zero, nothing to check.
        return tuple(g for g in grads if g.requires_grad)

    return first


def third_order(call: Call, inputs: tuple[torch.Tensor, ...], weights: list[torch.Tensor],
                s: Settings) -> str:
    """gradgradcheck of the first derivative: the third derivative against finite
    differences."""  # fmt: skip
    first = first_derivative(call, weights)
    with torch.enable_grad():
        if not first(*inputs):
            return "passed (the first derivative is constant)"
    if s.gradcheck_mode == "none":
        return "skipped (too many elements for gradgradcheck's Jacobians)"
    fast = s.gradcheck_mode == "fast"
    _run(lambda: gradgradcheck(first, inputs, **s.tol, fast_mode=fast,
                               check_undefined_grad=False), "gradgradcheck of the gradient")
    return "passed"


def torch_func_support(call: Call, inputs: tuple[torch.Tensor, ...],
                       weights: list[torch.Tensor], s: Settings) -> dict[str, str]:
    """Which torch.func transforms work (each linear in the input size)."""
    detached = tuple(x.detach() for x in inputs)
    scalar = call.scalar(weights)
    argnums = tuple(range(len(inputs)))
    tangents = tuple(_randn(x, s.generator) for x in inputs)
    probes: dict[str, Callable[[], object]] = {
        "vmap": lambda: torch.func.vmap(call)(
            *(x.unsqueeze(0).expand(2, *x.shape) for x in detached)
        ),
        "vjp (reverse mode)": lambda: torch.func.grad(scalar, argnums)(*detached),
        "jvp (forward mode)": lambda: torch.func.jvp(call, detached, tangents),
        "HVP (forward-over-reverse)": lambda: torch.func.jvp(
            torch.func.grad(scalar, argnums), detached, tangents
        ),
    }
    results = {}
    for name, probe in probes.items():
        try:
            quietly(probe)
        except Exception as error:  # noqa: BLE001
            results[name] = f"not supported ({_short(error)})"
        else:
            results[name] = "works"
    return results

