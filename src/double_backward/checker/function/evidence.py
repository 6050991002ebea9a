"""The evidence: each check the verdict rests on, at a point and in random directions.

Two kinds of check, for every order:

- torch's :func:`~torch.autograd.gradcheck` and :func:`~torch.autograd.gradgradcheck`, which
  build Jacobians: run only while the Jacobians are small (full mode up to
  ``FULL_MODE_UP_TO`` elements, fast mode while inputs x (inputs + outputs) stays under
  ``JACOBIAN_ENTRIES``), so a failure never makes torch build a Jacobian that does not fit;
- checks along random *signed* directions, each costing a few calls of the Function per step
  tried, so they run at every size: the incoming gradient left unchanged by backward, the
  vector-Jacobian product with a random incoming gradient against central differences,
  backward's linearity in the incoming gradient, a finite second derivative, the
  Hessian-vector product against central differences of the gradient, and the mixed term
  (through the incoming gradient) projected on a random signed w against backward's own
  product with w. The central differences choose their step per direction and
  refuse a segment where a kink is crossed
(:mod:`~double_backward.checker.shared.finite_differences`);
  a direction no step decides is drawn again, and when none decides (and no Jacobian check
  ran) the check fails as "undecided": nothing seen is never a pass.

With ``surrogate_gradient=True`` the first derivative is taken as given: the second-order
checks compare the derivative of *your backward* with central differences of your backward.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck

from ..shared.finite_differences import (
    Difference,
    all_finite,
    central_difference,
    settled,
)
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
# Directional checks: the relative error above which a direction fails (its central
# differences choose their own step: finite_differences). float64's 1e-3 gives the detection
# bound on plot_16c (how sure is a passing verdict).
DIRECTIONAL = {
    torch.float64: {"rtol": 1e-3},
    torch.float32: {"rtol": 2e-2},
    torch.float16: {"rtol": 2e-1},
    torch.bfloat16: {"rtol": 2e-1},
}
# A second derivative smaller than this share of the scale the gradient (and vᵀf) varies on
# is negligible: its error is judged against that floor, not against itself (logcumsumexp
# over a sample holding 1e4: an HVP of 5e-12 against central differences of exactly 0, for
# a gradient of size 1). gradgradcheck's atol (1e-5) plays the same part.
NEGLIGIBLE = {
    torch.float64: 1e-6,
    torch.float32: 1e-3,
    torch.float16: 1e-2,
    torch.bfloat16: 1e-2,
}
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
    # Directions decided at a finer step than a staircase's (settled): a note says so.
    staircases: int = 0
    # Where the shared directions of this check are drawn from (:func:`_directions`), and
    # the backwards already run with them (:func:`_backward`).
    drawn: dict = dataclasses.field(default_factory=dict, repr=False)
    backwards: dict = dataclasses.field(default_factory=dict, repr=False)

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
    """The incoming gradient left as it was, gradcheck (when small), linearity in the
    incoming gradient, signed directions."""
    outs = _attempt(lambda: _outputs(call, at), "forward")
    # What the directional checks read of the outputs: their size, and vᵀf for each shared v
    # (the center of its central differences); then only their shapes are kept (each output
    # is as large as the inputs, and would be held through every backward below).
    f_size = norm(outs)
    centers: dict[int, torch.Tensor] = {}  # vᵀf at ``at``, for each shared v: read from outs
    outs = list(outs)  # replaced by their shapes once read (linearity)
    incoming_untouched(call, at, outs, s, centers)
    done = []
    if s.gradcheck_mode != "none" and not s.surrogate_gradient:
        fast = s.gradcheck_mode == "fast"
        _run(lambda: gradcheck(call, at, **s.tol, fast_mode=fast), "gradcheck")
        done.append(f"gradcheck {s.gradcheck_mode}")
    linearity(call, at, outs, s, centers, f_size)
    if s.surrogate_gradient:  # the first derivative is taken as given
        return "passed: linear in grad_out (surrogate: taken as given)"
    tally = vjp_directions(call, at, outs, s, f_size, centers)
    return "passed: " + ", ".join([*done, "linear", _decided_text(tally, s.directions, "VJPs")])


def second_order(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> str:
    """gradgradcheck (when small), then Hessian-vector products and mixed terms in
    directions."""
    s.backwards.clear()  # the first order's backwards are not read again
    if not s.surrogate_gradient and s.gradcheck_mode != "none":
        # Before gradgradcheck, whose message would not say "NaN"; above its size the
        # directions look at their own Hessian-vector products (one forward and HVP fewer).
        _attempt(lambda: finite_second_derivative(call, at, s), "double backward")
    done = []
    if s.gradcheck_mode != "none":
        fast = s.gradcheck_mode == "fast"
        _run(lambda: gradgradcheck(
            call, at, **s.tol, fast_mode=fast, gen_non_contig_grad_outputs=False,
            check_undefined_grad=False,
        ), "gradgradcheck")  # fmt: skip
        done.append(f"gradgradcheck {s.gradcheck_mode}")
    if s.surrogate_gradient:
        tally = backward_derivative_directions(call, at, s)
        done.append(_decided_text(tally, s.directions, "directions"))
    else:
        tally = hvp_directions(call, at, s)
        done.append(_decided_text(tally, s.directions, "HVPs + mixed"))
    return "passed: " + ", ".join(done)


# -- directions -------------------------------------------------------------------------


# The dtype a direction is drawn in: torch's CPU normal sampler is vectorised for float32
# only (10^6 float64 normals: 17 ms; float32, then cast: 2.7 ms, torch 2.13 on one core).
# A direction needs no more than float32's 24 bits: it is still a standard normal draw, so
# the detection bound (derived for u ~ N(0, I)) is unchanged.
_DRAWN_IN = {torch.float64: torch.float32, torch.complex128: torch.complex64}


def draw(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A standard normal draw shaped like ``like``, drawn on the CPU (so the same seed gives
    the same draw on every device), then moved to ``like``'s device and dtype."""
    drawn_in = _DRAWN_IN.get(like.dtype, like.dtype)
    drawn = torch.randn(like.shape, generator=generator, dtype=drawn_in, device="cpu")
    return drawn.to(device=like.device, dtype=like.dtype)


_randn = draw


def drawer(like: Sequence[torch.Tensor], generator: torch.Generator
           ) -> Callable[[], list[torch.Tensor]]:  # fmt: skip
    """A function that returns standard normal draws shaped like ``like``, the same ones at
    each call, from a generator of their own (seeded from ``generator``: independent of its
    later draws); ``like`` is not held, only its shapes."""
    seed = int(torch.randint(2**62, (1,), generator=generator, device="cpu"))
    shapes = [_template(t) for t in like]

    def drawn() -> list[torch.Tensor]:
        own = torch.Generator(device="cpu").manual_seed(seed)
        return [draw(t, own) for t in shapes]

    return drawn


def _directions(like: Sequence[torch.Tensor], s: Settings, role: str, index: int
                ) -> list[torch.Tensor]:  # fmt: skip
    """Direction ``index`` of ``role`` ("v": incoming gradients, one per output; "u": one per
    input), the same draw wherever a check of this check asks for it: each check still takes
    independent draws among its own (index 0, 1, ...; v and u never the same draw), so each
    one's chance of a miss is what it was. Each output and each input has a draw of its own,
    also where two have the same shape: with one draw for both, a backward that swaps the
    incoming gradients of two such outputs (or the gradients of two such inputs) would give
    the same products. What is kept is the generator's state before the first draw, not the
    draw: it is drawn again for each use (float32 normals, 2.7 ms for 10^6 on one core), so
    that no direction outlives the check that uses it (one set per output and per index
    would be several times the inputs' size). A direction drawn again because none decided is
    a fresh draw: :func:`_randn`."""
    found = []
    for position, t in enumerate(like):
        key = (role, index, position, tuple(t.shape), t.dtype)
        if key in s.drawn:
            generator = torch.Generator(device="cpu")
            generator.set_state(s.drawn[key])
        else:
            generator = s.generator
            s.drawn[key] = generator.get_state()
        found.append(draw(t, generator))
    return found


def _backward(call: Call, at: tuple[torch.Tensor, ...], v: Sequence[torch.Tensor],
              s: Settings, index: int) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The gradients of a backward at ``at`` with the shared incoming gradients ``v``
    (:func:`_directions` "v", ``index``), run once per point and direction: the first-order
    checks read the same backwards (the last two kept: each is as large as the inputs)."""
    key = (id(at), index)
    if key not in s.backwards:
        grads = _attempt(lambda: _grad(call, at, v)[1], "backward")
        while len(s.backwards) >= 2:
            del s.backwards[next(iter(s.backwards))]
        s.backwards[key] = (at, grads)  # at held: its id stays its own
    return s.backwards[key][1]


def _direction_scale(at: Sequence[torch.Tensor]) -> float:
    """The scale of a direction: t = 1 moves the inputs by about their own magnitude (at
    least 1), so the steps of :func:`central_difference` are relative."""
    return max([1.0, *(float(x.detach().abs().pow(2).mean()) ** 0.5 for x in at if x.numel())])


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors as one flat vector (complex ones as pairs of reals), for the differences."""
    parts = [torch.view_as_real(t.resolve_conj()).reshape(-1) if t.is_complex()
             else t.reshape(-1) for t in tensors]  # fmt: skip
    if not parts:
        return torch.zeros(0, dtype=torch.float64, device="cpu")
    if len(parts) == 1:
        return parts[0]  # a view: no copy
    return torch.cat([p.to(torch.promote_types(p.dtype, parts[0].dtype)) for p in parts])


def _template(t: torch.Tensor) -> torch.Tensor:
    """A tensor with ``t``'s shape, dtype and device, holding one element (stride 0)."""
    return t.new_empty((1,) * t.dim()).expand(t.shape)


def _leaves(at: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(x.detach().requires_grad_() for x in at)


def _shifted(at: Sequence[torch.Tensor], u: Sequence[torch.Tensor], t: float) -> tuple:
    """``at + t u``: new tensors (one allocation each)."""
    return tuple(torch.add(x.detach(), d, alpha=t) for x, d in zip(at, u, strict=True))


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
    """Backward at ``at`` with incoming gradient ``v``: (the leaves, their gradients).
    The Function gets copies of the leaves: one that edits its input in place (mark_dirty)
    may not edit a leaf."""
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


def _grad_shifted(call: Call, at: Sequence[torch.Tensor], u: Sequence[torch.Tensor], t: float,
                  v: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The gradients of backward at ``at + t u`` with incoming gradient ``v`` (detached).
    The shifted point is made by autograd from leaves sharing ``at``'s memory, so the
    Function gets a new tensor that is no leaf (one it may edit in place, mark_dirty)
    without the copy :func:`_grad` makes: one vector fewer, per call, than a shift and a
    copy."""
    leaves = _leaves(at)
    with torch.enable_grad():
        shifted = [torch.add(x, d, alpha=t) for x, d in zip(leaves, u, strict=True)]
        outs = quietly(lambda: call(*shifted, fresh=True))
        shifted = []  # the graph holds what it needs of them
        grads = quietly(lambda: torch.autograd.grad(
            outs, leaves, v, allow_unused=True, materialize_grads=True))  # fmt: skip
    return tuple(g.detach() for g in grads)


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


def incoming_untouched(call: Call, at: tuple[torch.Tensor, ...],
                       outs: Sequence[torch.Tensor], s: Settings,
                       centers: dict[int, torch.Tensor]) -> None:  # fmt: skip
    """One backward with a random incoming gradient, which must come out of it unchanged:
    autograd may hand the same tensor to other consumers (and hands the caller's own tensor
    to backward), so a backward that edits it in place corrupts gradients elsewhere, and under
    create_graph (a penalty's incoming gradient requires grad) the edit raises. (Compared
    with the same draw made again afterwards: no copy alive during the backward.)"""
    v = _directions(outs, s, "v", 0)
    centers[0] = dot(v, outs)
    _backward(call, at, v, s, 0)
    kept = _directions(outs, s, "v", 0)
    changed = [i for i, (w, k) in enumerate(zip(v, kept, strict=True)) if not torch.equal(w, k)]
    if changed:
        raise Failed("modified-incoming", (
            f"the incoming gradient of output(s) {', '.join(map(str, changed))} was changed "
            "by backward (compared with the same values, drawn again after the call)."
        ))  # fmt: skip


def linearity(call: Call, at: tuple[torch.Tensor, ...], outs: list[torch.Tensor],
              s: Settings, centers: dict[int, torch.Tensor], f_size: float) -> None:  # fmt: skip
    """backward(a v1 + b v2) against a backward(v1) + b backward(v2), for random signed v1,
    v2, a and b, compared along a random direction u (each product of backward with u varies
    as much as backward itself, so a non-linear part shows at once). Reads vᵀf for v2 into
    ``centers``, then replaces ``outs`` by their shapes: the outputs are not held through the
    backwards from here on."""
    u = _directions(at, s, "u", 1)
    v1 = _directions(outs, s, "v", 0)
    v2 = _directions(outs, s, "v", 1)
    if s.directions > 1:
        centers[1] = dot(v2, outs)
    floor = NEGLIGIBLE[s.dtype] * max(norm(v1), norm(v2)) * f_size / _direction_scale(at)
    outs[:] = [_template(o) for o in outs]
    # Signed factors of size 0.5 to 2, so that neither term is negligible.
    size = torch.rand(2, generator=s.generator, dtype=torch.float64, device="cpu") * 1.5 + 0.5
    sign = torch.randint(0, 2, (2,), generator=s.generator, device="cpu") * 2 - 1
    a, b = (float(c) for c in size * sign)
    along, scale = [], 0.0

    def record(g: Sequence[torch.Tensor]) -> None:
        nonlocal scale
        along.append(float(dot(g, u)))
        scale = max(scale, norm(g))

    record(_backward(call, at, v1, s, 0))
    record(_backward(call, at, v2, s, 1))
    # a v1 + b v2, in v1's place (v1 and v2 are draws of their own), v2 freed before the
    # backward: one set of incoming gradients fewer alive.
    v = [p.mul_(a).add_(q, alpha=b) for p, q in zip(v1, v2, strict=True)]
    del v1, v2
    record(_attempt(lambda: _grad(call, at, v)[1], "backward"))
    # Judged against what backward could be too: a derivative that is zero but for rounding
    # (corrcoef of two observations is constant) is no scale of its own.
    error = abs(along[2] - a * along[0] - b * along[1]) / max(
        max(scale, floor) * (1 + abs(a) + abs(b)), 1e-300)  # fmt: skip
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


@dataclasses.dataclass
class Tally:
    """The directions of one check: the errors of those that decided, why the others did
    not."""

    errors: list[float] = dataclasses.field(default_factory=list)
    undecided: list[str] = dataclasses.field(default_factory=list)

    def why(self) -> str:
        counts = {reason: self.undecided.count(reason) for reason in dict.fromkeys(self.undecided)}
        return ", ".join(f"{reason} in {count}" for reason, count in counts.items())


def _difference(along: Callable[[float], torch.Tensor], c: float, s: Settings,
                scale: float, accept: Callable[[torch.Tensor], bool] | None = None,
                center: torch.Tensor | None = None) -> Difference:  # fmt: skip
    """The derivative along a direction scaled by ``c``, per unit of that direction
    (``center``: ``along(0)``, when it is known already); one that ``accept`` rejects is tried
    again at finer steps (a staircase: settled)."""
    found = central_difference(along, dtype=s.dtype, scale=scale * c, center=center)
    if accept is not None and found.value is not None:
        found = settled(along, found, lambda value: accept(value / c), dtype=s.dtype,
                        scale=scale * c)  # fmt: skip
    if found.value is None:
        return found
    return dataclasses.replace(found, value=found.value / c)


def _vector_error(analytic: torch.Tensor, estimate: torch.Tensor, floor: float) -> float:
    """|analytic - estimate| / max(|analytic|, |estimate|, floor): the relative error, where
    ``floor`` (a size below which a derivative is rounding) keeps a zero derivative from being
    judged against its own rounding. A NaN or inf in ``analytic`` is an infinite error."""
    analytic_norm = norm([analytic])
    if not all_finite(analytic, analytic_norm):
        return math.inf
    analytic = analytic.to(estimate.dtype)
    scale = max(analytic_norm, norm([estimate]), floor)
    return norm([analytic - estimate]) / scale if scale > 0 else 0.0


def _error_text(worst: float) -> str:
    """The worst relative error for the report; below 1e-8 it is rounding noise, whose last
    digits may differ between machines, so it is not printed."""
    return "error < 1e-8" if worst < 1e-8 else f"error {worst:.0e}"


def _worst(tally: Tally, s: Settings, what: str,
           against: str = "central differences") -> float:  # fmt: skip
    """The worst error over the directions that decided, or :class:`Failed`: "mismatch" when
    one exceeds the tolerance, "undecided" when none decided and no Jacobian check ran."""
    failing = [e for e in tally.errors if e > s.rtol]
    if failing:
        raise Failed("mismatch", (
            f"{what}: relative error {max(failing):.2g} against {against} in "
            f"{len(failing)} of {len(tally.errors)} random signed directions (tolerance "
            f"{s.rtol:g})."
        ))  # fmt: skip
    if not tally.errors and s.gradcheck_mode == "none":
        raise Failed("undecided", (
            f"{what}: no random direction could be decided by central differences "
            f"({tally.why()} of {len(tally.undecided)})."
        ))  # fmt: skip
    return max(tally.errors, default=0.0)


def _decided_text(tally: Tally, wanted: int, what: str) -> str:
    """"2 HVPs + mixed (error < 1e-8)", or how many decided, and why the others did not."""
    if len(tally.errors) >= wanted and not tally.undecided:
        return f"{wanted} {what} ({_error_text(max(tally.errors))})"
    if not tally.errors:
        return f"0 {what} decided ({tally.why()}): the Jacobian check above is the evidence"
    return (f"{len(tally.errors)} {what} ({_error_text(max(tally.errors))}; "
            f"{len(tally.undecided)} undecided: {tally.why()})")  # fmt: skip


def vjp_directions(call: Call, at: tuple[torch.Tensor, ...], outs: Sequence[torch.Tensor],
                   s: Settings, f_size: float, centers: dict[int, torch.Tensor]) -> Tally:
    """uᵀ(Jᵀv) from backward against the central difference of vᵀf along u, for random
    signed v and u (u drawn again, up to three times, where no step decides). ``outs``: the
    outputs' shapes; ``f_size``: their norm; ``centers``: vᵀf at ``at`` for the v read so far
    (the others' is computed)."""  # fmt: skip
    c = _direction_scale(at)
    tally = Tally()
    for index in range(s.directions):
        v = _directions(outs, s, "v", index)
        g = _backward(call, at, v, s, index)
        # Below this, a derivative is negligible beside what vᵀf varies by over c (corrcoef
        # of two observations is constant: both derivatives are 1e-16 noise).
        floor = NEGLIGIBLE[s.dtype] * norm(v) * f_size / c
        for attempt in range(3):
            u = (_directions(at, s, "u", index) if attempt == 0
                 else [_randn(x, s.generator) for x in at])  # fmt: skip
            analytic = float(dot(g, u))

            def along(t: float, u: list = u, v: list = v) -> torch.Tensor:
                return dot(v, _outputs(call, _shifted(at, u, c * t), fresh=True))

            def accept(value: torch.Tensor, analytic: float = analytic, g: list = g,
                       floor: float = floor) -> bool:  # the error below  # fmt: skip
                estimate = float(value)
                return abs(analytic - estimate) <= s.rtol * max(
                    norm(g) + abs(estimate), floor, 1e-300)  # fmt: skip

            center = centers.get(index)  # along(0), where the outputs were read
            found = _attempt(lambda along=along, g=g, accept=accept, center=center: _difference(
                along, c, s, norm(g), accept, center), "forward")  # fmt: skip
            if found.value is None:
                tally.undecided.append(found.reason)
                continue
            estimate = float(found.value)
            s.staircases += found.refined
            error = abs(analytic - estimate) / max(norm(g) + abs(estimate), floor, 1e-300)
            tally.errors.append(error if math.isfinite(analytic) else math.inf)
            break
    _worst(tally, s, "the first derivative (vector-Jacobian product)")
    return tally


NON_FINITE_SECOND = "NaN or inf in the second derivative"


def _analytic_second(call: Call, at: tuple[torch.Tensor, ...], v: Sequence[torch.Tensor],
                     u: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The Hessian-vector product of vᵀf along u and the mixed term J u, by double backward
    (an incoming gradient that requires grad, as in a gradient penalty), flat; and |g|."""
    hvp, mixed, g = _second_at(call, at, v, u)
    return hvp, _flat(mixed), norm([g])


def _second_at(
    call: Call, at: tuple[torch.Tensor, ...], v: Sequence[torch.Tensor],
    u: Sequence[torch.Tensor],
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:  # fmt: skip
    """The Hessian-vector product (flat), the mixed term (one tensor per output, not
    concatenated: no copy as large as the outputs) and the gradient g(at, v) itself (flat,
    detached: the centre of its central differences, not computed again)."""
    # Leaves sharing v's memory (no copy): backward cannot edit them in place (a leaf that
    # requires grad refuses it), and one that tries fails incoming_untouched first.
    incoming = [w.detach().requires_grad_() for w in v]
    leaves, g = _grad(call, at, incoming, create_graph=True)
    with torch.enable_grad():
        second = _second(dot(g, u), [*leaves, *incoming])
    return _flat(second[: len(leaves)]), list(second[len(leaves):]), _flat(
        [x.detach() for x in g])  # fmt: skip


def _require_finite_second(hvp: torch.Tensor, mixed: Sequence[torch.Tensor]) -> None:
    """Failed when the Hessian-vector product or the mixed term holds a NaN or inf (called
    where the outputs and the first derivative are finite). A NaN compares as neither equal
    nor unequal, so it is looked for; the norms answer without a scan when all is finite."""
    if all_finite(hvp, norm([hvp])) and all(all_finite(m, norm([m])) for m in mixed):
        return
    bad = sum(int((~torch.isfinite(t)).sum()) for t in (hvp, *mixed))
    if bad:
        total = hvp.numel() + sum(_flat([m]).numel() for m in mixed)
        raise Failed("mismatch", (
            f"{NON_FINITE_SECOND}: {bad} of {total} elements of a "
            "Hessian-vector product and mixed term are NaN or inf, though the outputs and the "
            "first derivative are finite."
        ))  # fmt: skip


def finite_second_derivative(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> None:
    """One Hessian-vector product and mixed term, which must be finite where the outputs and
    the first derivative are. (Above gradcheck's size :func:`hvp_directions` looks at its
    own, and this one is not run.)"""
    outs = _outputs(call, at)
    v = _directions(outs, s, "v", 0)
    u = _directions(at, s, "u", 0)
    hvp, mixed, g = _second_at(call, at, v, u)
    if not math.isfinite(norm([g])):
        return  # the first derivative is not finite: its own checks say so
    _require_finite_second(hvp, mixed)


def _mixed_error(call: Call, at: tuple[torch.Tensor, ...], mixed: list[torch.Tensor],
                 u: Sequence[torch.Tensor], w: Sequence[torch.Tensor], floor: float) -> float:
    """The mixed term m = J u from double backward, projected on a random signed w, against
    backward's own product with w: wᵀm = uᵀ(Jᵀw) exactly, since g(x, v) is linear in v
    (checked) and its product with u is checked against central differences. A number, not a
    vector: central differences of f along u held seven vectors shaped like the outputs. An
    error e in m shows as wᵀe ~ |e| N(0, 1): missed with the HVP's chance, sqrt(2/pi) τ/ε.
    Empties ``mixed`` once read: its memory is free for backward's."""
    analytic, size = float(dot(mixed, w)), norm(mixed)
    mixed.clear()
    reference = float(dot(_grad(call, at, w)[1], u))
    if not math.isfinite(analytic):
        return math.inf
    return abs(analytic - reference) / max(size + abs(reference), floor, 1e-300)


def hvp_directions(call: Call, at: tuple[torch.Tensor, ...], s: Settings) -> Tally:
    """With an incoming gradient v that requires grad, differentiate uᵀg(x, v) once more:
    its derivative in x (the Hessian-vector product of vᵀf) against central differences of
    g along u, and in v (the mixed term, J u), projected on a random w, against backward's
    product uᵀ(Jᵀw). Each must be finite. A direction counts when the central differences
    decide (a wrong mixed term counts at once); one that no step decides is drawn again (up
    to three times as many draws as ``s.directions``)."""
    outs = _attempt(lambda: _outputs(call, at), "forward")
    f_size = norm(outs)
    outs = [_template(o) for o in outs]  # only their shapes are needed now
    c = _direction_scale(at)
    rounding = NEGLIGIBLE[s.dtype]
    tally = Tally()

    def along_g(u: list, v: list) -> Callable[[float], torch.Tensor]:
        return lambda t: _flat(_grad_shifted(call, at, u, c * t, v))

    def one(index: int) -> float | str:
        # The shared directions first, fresh draws for a direction drawn again.
        shared = index < s.directions
        v = _directions(outs, s, "v", index) if shared else [_randn(o, s.generator) for o in outs]
        u = _directions(at, s, "u", index) if shared else [_randn(x, s.generator) for x in at]
        hvp, mixed, g_at = _second_at(call, at, v, u)
        g_size = norm([g_at])
        if math.isfinite(g_size):  # else the first derivative's own checks say so
            _require_finite_second(hvp, mixed)
        # Sizes below which a second derivative is negligible: a share NEGLIGIBLE of what
        # the gradient, and vᵀf, could change by over the direction's scale c (corrcoef of
        # one row is constant: its HVPs are 1e-17 noise, not to be compared with each other).
        hvp_floor = rounding * (g_size + norm(v) * f_size / c) / c
        # The mixed term first, then freed: one vector fewer alive during the HVP's. Its w,
        # independent of this direction's v and u: the other shared v, or a fresh draw.
        other = 1 - index
        w = (_directions(outs, s, "v", other) if 0 <= other < s.directions
             else [_randn(o, s.generator) for o in outs])  # fmt: skip
        mixed_error = _mixed_error(call, at, mixed, u, w, rounding * f_size / c)
        del w
        if mixed_error > s.rtol:
            return mixed_error  # a wrong mixed term counts, whatever the HVP's differences
        # Judged against the floor too: a zero HVP (a piecewise-linear function) whose
        # gradient rounds differently at each shifted point is not its own scale.
        on_g = _difference(along_g(u, v), c, s, max(norm([hvp]), hvp_floor),
                           lambda value: _vector_error(hvp, value, hvp_floor) <= s.rtol,
                           center=g_at)  # fmt: skip
        del g_at
        if on_g.value is None:
            return on_g.reason
        s.staircases += on_g.refined
        return max(_vector_error(hvp, on_g.value, hvp_floor), mixed_error)

    tries = 0
    while len(tally.errors) < s.directions and tries < 3 * s.directions:
        found = _attempt(lambda index=tries: one(index), "double backward")
        tries += 1
        if isinstance(found, str):
            tally.undecided.append(found)
        else:
            tally.errors.append(found)
            if found > s.rtol:
                break
    _worst(tally, s, "the second derivative (Hessian-vector product, mixed term)",
           "central differences of the gradient (the mixed term: against backward)")
    return tally


def backward_derivative_directions(call: Call, at: tuple[torch.Tensor, ...],
                                   s: Settings) -> Tally:
    """Surrogate gradients: the derivative of uᵀg(x, v), g your backward, in a random
    direction (p, q) of (x, v), against central differences of your backward."""  # fmt: skip
    outs = _attempt(lambda: _outputs(call, at), "forward")
    c = _direction_scale([*at, *outs])
    tally = Tally()

    def one() -> float | str:
        v = [_randn(o, s.generator) for o in outs]
        u = [_randn(x, s.generator) for x in at]
        p = [_randn(x, s.generator) for x in at]
        q = [_randn(o, s.generator) for o in outs]
        incoming = [w.clone().requires_grad_() for w in v]
        leaves, g = _grad(call, at, incoming, create_graph=True)
        with torch.enable_grad():
            second = _second(dot(g, u), [*leaves, *incoming])
        analytic = float(dot(second, [*p, *q]))

        def backward_along(t: float) -> torch.Tensor:
            shifted_v = [w + c * t * d for w, d in zip(v, q, strict=True)]
            return dot(_grad(call, _shifted(at, p, c * t), shifted_v)[1], u)

        found = _difference(backward_along, c, s, norm(second))
        if found.value is None:
            return found.reason
        estimate = float(found.value)
        if not math.isfinite(analytic):
            return math.inf
        return abs(analytic - estimate) / max(norm(second) + abs(estimate), 1e-300)

    tries = 0
    while len(tally.errors) < s.directions and tries < 3 * s.directions:
        tries += 1
        found = _attempt(one, "double backward")
        if isinstance(found, str):
            tally.undecided.append(found)
        else:
            tally.errors.append(found)
    _worst(tally, s, "the derivative of backward")
    return tally


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
    # Both zero but for rounding (copysign: 0 one way, 1e-18 the other) is agreement: the
    # difference is judged against what an HVP of this gradient could be, too.
    c = _direction_scale(inputs)
    outputs = _outputs(call, inputs)
    floor = (NEGLIGIBLE[s.dtype] * norm(vectors) / c
             * (norm(grads) + norm(weights) * norm(outputs) / c))  # fmt: skip
    difference = norm([a - b for a, b in zip(forward, reverse, strict=True)])
    size = max(norm(forward), norm(reverse), floor)
    return "agree" if difference <= s.tol["rtol"] * size else "DISAGREE"


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
    differences (or where no step decides it). Run after a failure, to say where it is (one
    direction per input)."""  # fmt: skip
    outs = _outputs(call, at)
    c = _direction_scale(at)
    rounding = NEGLIGIBLE[s.dtype]
    v = [_randn(o, s.generator) for o in outs]
    wrong = []
    for j in range(len(at)):
        u = [_randn(x, s.generator) if k == j else torch.zeros_like(x)
             for k, x in enumerate(at)]  # fmt: skip
        leaves, g = _grad(call, at, v, create_graph=True)
        with torch.enable_grad():
            second = _second(dot(g, u), leaves)
        g_size = norm(g)
        del leaves, g
        for i in range(len(at)):
            found = _difference(
                lambda t, i=i, u=u: _flat(
                    [_grad(call, _shifted(at, u, c * t), v)[1][i]]),
                c, s, norm([second[i]]),
            )  # fmt: skip
            if found.value is None or _vector_error(
                _flat([second[i]]), found.value, rounding * g_size / c
            ) > s.rtol:
                wrong.append((j, i))
    return wrong
