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
  the gradient. Where a function may have a kink (a ReLU), the differences show it: for a
  scalar, the central differences at steps h and h/2 disagree, and another direction is
  drawn; for a vector, the one-sided differences of an element disagree, and that element
  is left out (a direction leaving out more than 10% is drawn again).

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
# A direction whose one-sided differences disagree on more than this share of the elements
# crosses kinks everywhere: it is inconclusive, and another is drawn.
NON_SMOOTH_SHARE = 0.1
CHUNK = 1 << 16  # elements per chunk of the comparisons: their temporaries stay small


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
    if s.gradcheck_mode != "none" and not s.surrogate_gradient:
        fast = s.gradcheck_mode == "fast"
        _run(lambda: gradcheck(call, at, **s.tol, fast_mode=fast), "gradcheck")
        done.append(f"gradcheck {s.gradcheck_mode}")
    outs = _attempt(lambda: _outputs(call, at), "forward")
    linearity(call, at, outs, s)
    if s.surrogate_gradient:  # the first derivative is taken as given
        return "passed: linear in grad_out (surrogate: taken as given)"
    worst = vjp_directions(call, at, outs, s)
    return "passed: " + ", ".join([*done, "linear", f"{s.directions} VJPs ({_error_text(worst)})"])


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
        done.append(f"{s.directions} directions ({_error_text(worst)})")
    else:
        worst = hvp_directions(call, at, s)
        done.append(f"{s.directions} HVPs + mixed ({_error_text(worst)})")
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


def _outputs(call: Call, at: Sequence[torch.Tensor], fresh: bool = False
             ) -> tuple[torch.Tensor, ...]:  # fmt: skip
    with torch.no_grad():
        return tuple(o.detach() for o in quietly(lambda: call(*at, fresh=fresh)))


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


def _second(total: torch.Tensor, wrt: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The gradient of ``total`` (built with create_graph) with respect to ``wrt``."""
    if not total.requires_grad:  # no graph at all: every second derivative is zero
        return tuple(torch.zeros_like(w) for w in wrt)
    with torch.enable_grad():
        return quietly(lambda: torch.autograd.grad(
            total, wrt, allow_unused=True, materialize_grads=True))  # fmt: skip


def _attempt(compute: Callable[[], Any], what: str) -> Any:
    try:
        return compute()
    except Failed:
        raise
    except Exception as error:  # noqa: BLE001 - the Function's error is the evidence
        raise Failed("raised", f"{what} raised", error) from error


def linearity(call: Call, at: tuple[torch.Tensor, ...], outs: Sequence[torch.Tensor],
              s: Settings) -> None:  # fmt: skip
    """backward(a v1 + b v2) against a backward(v1) + b backward(v2), for random signed v1,
    v2, a and b, compared along a random direction u (each product of backward with u varies
    as much as backward itself, so a non-linear part shows at once)."""
    u = [_randn(x, s.generator) for x in at]
    v1 = [_randn(o, s.generator) for o in outs]
    v2 = [_randn(o, s.generator) for o in outs]
    # Signed factors of size 0.5 to 2, so that neither term is negligible.
    size = torch.rand(2, generator=s.generator, dtype=torch.float64) * 1.5 + 0.5
    sign = torch.randint(0, 2, (2,), generator=s.generator) * 2 - 1
    a, b = (float(c) for c in size * sign)
    combined = [(p * a).add_(q, alpha=b) for p, q in zip(v1, v2, strict=True)]
    along, scale = [], 0.0
    for v in (v1, v2, combined):
        g = _attempt(lambda v=v: _grad(call, at, v)[1], "backward")
        along.append(float(dot(g, u)))
        scale = max(scale, norm(g))
        del g
    error = abs(along[2] - a * along[0] - b * along[1]) / max(scale * (1 + abs(a) + abs(b)),
                                                             1e-12)  # fmt: skip
    if error > s.rtol:
        raise Failed("nonlinear", (
            f"backward(a*v1 + b*v2) differs from a*backward(v1) + b*backward(v2) by "
            f"{error:.2g} (relative), with random signed incoming gradients v1, v2 and "
            f"a={a:.2f}, b={b:.2f}."
        ))  # fmt: skip


def _relative(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """|a - b| / max(|a|, |b|), in chunks (no temporary as large as the tensors)."""
    squared = 0.0
    for x, y in zip(a, b, strict=True):
        for p, q in zip(x.detach().reshape(-1).split(CHUNK), y.detach().reshape(-1).split(CHUNK),
                        strict=True):  # fmt: skip
            squared += float((p - q).abs().pow(2).sum())
    difference = squared**0.5
    scale = max(norm(a), norm(b))
    return difference / scale if scale > 0 else 0.0


def _scalar_error(analytic: float, phi: Callable[[float], torch.Tensor], h: float,
                  scale: float, s: Settings) -> float | None:
    """Relative error of a directional derivative against central differences of ``phi``;
    None when the steps h and h/2 disagree (a kink crossed: the direction is
    inconclusive)."""  # fmt: skip
    fd, fd_half = ((float(phi(t)) - float(phi(-t))) / (2 * t) for t in (h, h / 2))
    scale = max(scale + abs(fd), 1e-12)
    if abs(fd - fd_half) > s.rtol * scale:
        return None
    return abs(analytic - fd) / scale


def _vector_error(analytic: Sequence[torch.Tensor], center: Sequence[torch.Tensor],
                  plus: Sequence[torch.Tensor], minus: Sequence[torch.Tensor], h: float,
                  s: Settings) -> float | None:
    """Relative error of a vector of directional derivatives against central differences
    (plus - minus) / 2h, leaving out the elements where the one-sided differences disagree
    (a kink crossed); None when too many do. Computed in chunks, so that the temporaries
    stay small whatever the size."""  # fmt: skip
    squared_error = squared_analytic = squared_fd = 0.0
    left_out = total = 0
    typical = norm(analytic) / max(1, sum(a.numel() for a in analytic)) ** 0.5
    for tensors in zip(analytic, center, plus, minus, strict=True):
        flat = [t.detach().reshape(-1) for t in tensors]
        for a, c, p, m in zip(*(t.split(CHUNK) for t in flat), strict=True):
            ahead, behind = (p - c) / h, (c - m) / h
            smooth = (ahead - behind).abs() <= s.rtol * (ahead.abs() + behind.abs() + typical)
            fd = (ahead + behind) / 2
            left_out += smooth.numel() - int(smooth.sum())
            total += smooth.numel()
            squared_error += float(((a - fd) * smooth).abs().pow(2).sum())
            squared_analytic += float((a * smooth).abs().pow(2).sum())
            squared_fd += float((fd * smooth).abs().pow(2).sum())
    if total and left_out > NON_SMOOTH_SHARE * total:
        return None
    scale = max(squared_analytic, squared_fd)
    return (squared_error / scale) ** 0.5 if scale > 0 else 0.0


def _error_text(worst: float) -> str:
    """The worst relative error for the report; below 1e-8 it is rounding noise, whose last
    digits may differ between machines, so it is not printed."""
    return "error < 1e-8" if worst < 1e-8 else f"error {worst:.0e}"


def _worst(errors: list[float], tried: int, s: Settings, what: str) -> float:
    """The worst error over the conclusive directions, or :class:`Failed`."""
    failing = [e for e in errors if e > s.rtol]
    if failing:
        raise Failed("mismatch", (
            f"{what}: relative error {max(failing):.2g} against central differences in "
            f"{len(failing)} of {len(errors)} random signed directions (tolerance "
            f"{s.rtol:g})."
        ))  # fmt: skip
    return max(errors, default=0.0)  # none conclusive: gradcheck's evidence stands alone


def vjp_directions(call: Call, at: tuple[torch.Tensor, ...], outs: Sequence[torch.Tensor],
                   s: Settings) -> float:
    """uᵀ(Jᵀv) from backward against the central difference of vᵀf along u, for random
    signed v and u (u drawn again, up to three times, where f has a kink)."""  # fmt: skip
    h = _step(at, s)
    errors = []
    for _ in range(s.directions):
        v = [_randn(o, s.generator) for o in outs]
        g = _attempt(lambda v=v: _grad(call, at, v)[1], "backward")
        for _ in range(3):
            u = [_randn(x, s.generator) for x in at]
            error = _attempt(lambda u=u, v=v, g=g: _scalar_error(
                float(dot(g, u)), lambda t: dot(v, _outputs(call, _shifted(at, u, t), fresh=True)),
                h, norm(g), s), "forward")  # fmt: skip
            if error is not None:
                errors.append(error)
                break
    return _worst(errors, s.directions, s, "the first derivative (vector-Jacobian product)")


def hvp_directions(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> float:
    """With an incoming gradient v that requires grad, differentiate uᵀg(x, v) once more:
    its derivative in x (the Hessian-vector product of vᵀf) against central differences of
    g along u, and in v (the mixed term, J u) against central differences of f along u."""
    outs = _attempt(lambda: _outputs(call, at), "forward")
    h = _step(at, s)
    errors = []

    def one() -> float | None:
        v = [_randn(o, s.generator) for o in outs]
        u = [_randn(x, s.generator) for x in at]
        incoming = [w.clone().requires_grad_() for w in v]
        leaves, g = _grad(call, at, incoming, create_graph=True)
        with torch.enable_grad():
            second = _second(dot(g, u), [*leaves, *incoming])
        hvp, mixed = second[: len(leaves)], second[len(leaves):]
        g = tuple(x.detach() for x in g)
        del leaves, incoming  # free the graph before the differences
        _, g_plus = _grad(call, _shifted(at, u, h), v)
        _, g_minus = _grad(call, _shifted(at, u, -h), v)
        hvp_error = _vector_error(hvp, g, g_plus, g_minus, h, s)
        del g_plus, g_minus
        f_plus = _outputs(call, _shifted(at, u, h), fresh=True)
        f_minus = _outputs(call, _shifted(at, u, -h), fresh=True)
        mixed_error = _vector_error(mixed, outs, f_plus, f_minus, h, s)
        if hvp_error is None or mixed_error is None:
            return None
        return max(hvp_error, mixed_error)

    tries = 0
    while len(errors) < s.directions and tries < 3 * s.directions:
        tries += 1
        error = _attempt(one, "double backward")
        if error is not None:
            errors.append(error)
    return _worst(errors, tries, s,
                  "the second derivative (Hessian-vector product, mixed term)")  # fmt: skip


def backward_derivative_directions(call: Call, at: tuple[torch.Tensor, ...],
                                   s: Settings) -> float:
    """Surrogate gradients: the derivative of uᵀg(x, v), g your backward, in a random
    direction (p, q) of (x, v), against central differences of your backward."""  # fmt: skip
    outs = _attempt(lambda: _outputs(call, at), "forward")
    h = _step([*at, *outs], s)
    errors = []

    def one() -> float | None:
        v = [_randn(o, s.generator) for o in outs]
        u = [_randn(x, s.generator) for x in at]
        p = [_randn(x, s.generator) for x in at]
        q = [_randn(o, s.generator) for o in outs]
        incoming = [w.clone().requires_grad_() for w in v]
        leaves, g = _grad(call, at, incoming, create_graph=True)
        with torch.enable_grad():
            second = _second(dot(g, u), [*leaves, *incoming])

        def backward_along(t: float) -> torch.Tensor:
            shifted_v = [w + t * d for w, d in zip(v, q, strict=True)]
            return dot(_grad(call, _shifted(at, p, t), shifted_v)[1], u)

        return _scalar_error(float(dot(second, [*p, *q])), backward_along, h, norm(second), s)

    tries = 0
    while len(errors) < s.directions and tries < 3 * s.directions:
        tries += 1
        error = _attempt(one, "double backward")
        if error is not None:
            errors.append(error)
    return _worst(errors, tries, s, "the derivative of backward")


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



def wrong_second_derivatives(call: Call, at: tuple[torch.Tensor, ...],
                             s: Settings) -> list[tuple[int, int]]:
    """Which blocks of the second derivative are wrong: pairs (j, i) where the derivative of
    the gradient with respect to input j, with respect to input i, disagrees with central
    differences. Run after a failure, to say where it is (one direction per input)."""  # fmt: skip
    outs = _outputs(call, at)
    h = _step(at, s)
    v = [_randn(o, s.generator) for o in outs]
    wrong = []
    for j in range(len(at)):
        u = [_randn(x, s.generator) if k == j else torch.zeros_like(x)
             for k, x in enumerate(at)]  # fmt: skip
        leaves, g = _grad(call, at, v, create_graph=True)
        with torch.enable_grad():
            second = _second(dot(g, u), leaves)
        g = tuple(x.detach() for x in g)
        g_plus = _grad(call, _shifted(at, u, h), v)[1]
        g_minus = _grad(call, _shifted(at, u, -h), v)[1]
        for i in range(len(at)):
            error = _vector_error([second[i]], [g[i]], [g_plus[i]], [g_minus[i]], h, s)
            if error is None or error > s.rtol:
                wrong.append((j, i))
    return wrong
