"""Central differences that choose their step, and say when they cannot decide.

One fixed step fails both ways: too large, it crosses a kink (a ReLU whose input is near 0)
or leaves the region where a strongly curved function is near-linear; too small, rounding
(and a float32 op inside a float64 function) swamps the difference. So
:func:`central_difference` sweeps the steps from large to small and accepts the first one
``h`` where

- the central differences at ``h`` and ``h/2`` agree (Richardson: for a smooth function they
  differ by O(h²), three times the error of ``D(h/2)``, and the extrapolation
  ``(4 D(h/2) - D(h)) / 3``, with an O(h⁴) error, is then returned), and
- no kink is crossed: the asymmetry ``(f(h) - 2 f(0) + f(-h)) / h`` between the one-sided
  differences is ``h f''`` for a smooth function, so it halves with the step; a gradient
  discontinuity inside the segment (any op: an activation pattern changing, a max switching
  its argument, a sort swapping two values) makes it O(1) and it does not halve.

When no step passes, the result is *undecided*, with the reason: ``"kink crossed"`` (every
step crossed one: at t=0 the function has no derivative along this direction, e.g. a ReLU
whose input is exactly 0), ``"steps disagree"`` (rounding or curvature at every scale), or
``"non-finite values"``. A caller draws another direction, and never counts an undecided one
as a pass. A step where ``along`` raises (a shifted point outside the function's domain) is
skipped; if it raises at every step, its first error is raised.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch

# Steps relative to the direction's scale (the caller scales the direction so that t = 1
# moves the inputs by about their own magnitude), largest first, and the relative tolerance
# of the agreement tests. Sized per dtype from its rounding error eps: the smallest step keeps
# eps / h well below the tolerance; float64's largest step (1e-2) still decides a function
# computed partly in float32 (rounding 6e-8 / 1e-2 = 6e-6).
STEPS: dict[torch.dtype, tuple[float, ...]] = {
    torch.float64: (1e-2, 3e-3, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8),
    torch.float32: (1e-1, 3e-2, 1e-2, 3e-3, 1e-3),
    torch.float16: (1e-1, 3e-2, 1e-2),
    torch.bfloat16: (2e-1, 1e-1, 5e-2),
}
TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-4,
    torch.float32: 2e-3,
    torch.float16: 2e-2,
    torch.bfloat16: 5e-2,
}
KINK = "kink crossed"
DISAGREE = "steps disagree"
NON_FINITE = "non-finite values"
#: How much finer than the step that decided :func:`settled` sweeps again.
FINER = 100.0


@dataclasses.dataclass(frozen=True)
class Difference:
    """The outcome of :func:`central_difference`."""

    value: torch.Tensor | None  # the central-difference estimate, None when undecided
    step: float | None  # the step that decided, relative to the direction's scale
    decided: bool
    reason: str  # "" when decided; else why: "kink crossed", "steps disagree", "non-finite values"
    # Decided by :func:`settled` at a finer step than a first value it replaced (a staircase).
    refined: bool = False


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for complex128, float32 for complex64, else the dtype itself."""
    return (
        torch.empty((), dtype=dtype, device="meta").real.dtype
        if dtype.is_complex
        else dtype
    )


def coarsest(*dtypes: torch.dtype) -> torch.dtype:
    """The least precise of the floating dtypes (the one whose rounding decides)."""
    known = [real_dtype(d) for d in dtypes if real_dtype(d) in STEPS]
    if not known:
        raise ValueError(f"central_difference: no floating dtype among {dtypes}")
    return max(known, key=lambda d: torch.finfo(d).eps)


def central_difference(
    along: Callable[[float], torch.Tensor],
    *,
    dtype: torch.dtype,
    steps: Sequence[float] | None = None,
    tolerance: float | None = None,
    scale: float = 0.0,
    center: torch.Tensor | None = None,
) -> Difference:
    """Derivative at t=0 of t -> along(t) (a tensor of any shape), by central differences,
    choosing the step: a sweep over several scales, accepted only where h and h/2 agree
    (Richardson), refusing a segment where a kink is crossed (one-sided differences disagree
    at O(1), i.e. a gradient discontinuity along the segment, for any op, not only
    elementwise).

    ``dtype`` is the dtype the function computes in; the defaults follow the less precise of it
    and the dtype ``along`` returns. ``tolerance`` is relative to ``max(scale, |estimate|)``
    (norms over all elements): pass as ``scale`` the size the estimate will be compared
    against (the analytic derivative's norm), so that a derivative that is truly zero is not
    judged against its own rounding noise. The differences are taken in float64 (complex128
    for complex values), and the value comes back in that dtype. ``center``, when the caller
    has it already, is ``along(0)`` (one call fewer).
    """
    if steps is not None and (not steps or any(not h > 0 for h in steps)):
        raise ValueError(
            f"central_difference: steps must be positive floats, got {steps!r}"
        )
    center = along(0.0) if center is None else center
    if not isinstance(center, torch.Tensor):
        raise TypeError(
            f"central_difference: along(t) must return a tensor, got {type(center)}"
        )
    computed = coarsest(dtype, center.dtype)
    steps = tuple(steps) if steps is not None else STEPS[computed]
    tolerance = TOLERANCE[computed] if tolerance is None else tolerance
    eps = torch.finfo(computed).eps
    wide = torch.complex128 if center.is_complex() else torch.float64

    def at(t: float) -> torch.Tensor:
        return _mutable(along(t).detach().to(wide))

    f0 = _mutable(center.detach().to(wide))
    f0_norm = _norm(f0)
    if not all_finite(f0, f0_norm):
        return Difference(None, None, False, NON_FINITE)
    reasons = []
    kinks: list[tuple[float, float]] = []  # (step, asymmetry) where a kink was flagged
    errors: list[Exception] = []  # raised by along(t) at a step (it worked at t = 0)
    for h in steps:
        # The four values are taken two at a time and folded at once into what is needed
        # (no more than seven vectors alive: the check's memory stays a small multiple of the
        # inputs' at any size).
        try:
            plus, minus = at(h), at(-h)
        except Exception as error:  # noqa: BLE001 - outside the domain at this step?
            errors.append(error)
            continue
        plus_norm, minus_norm = _norm(plus), _norm(minus)
        if not (all_finite(plus, plus_norm) and all_finite(minus, minus_norm)):
            reasons.append(NON_FINITE)  # perhaps outside the domain: a smaller step may not be
            continue
        largest = max(f0_norm, plus_norm, minus_norm)
        wide_diff = (plus - minus).div_(2 * h)
        wide_curve = plus.add(minus).sub_(f0, alpha=2).div_(2 * h)  # (f(h) - 2f(0) + f(-h))/2h
        del plus, minus
        try:
            half_plus, half_minus = at(h / 2), at(-h / 2)
        except Exception as error:  # noqa: BLE001
            errors.append(error)
            continue
        half_plus_norm, half_minus_norm = _norm(half_plus), _norm(half_minus)
        if not (all_finite(half_plus, half_plus_norm) and all_finite(half_minus, half_minus_norm)):
            reasons.append(NON_FINITE)
            continue
        largest = max(largest, half_plus_norm, half_minus_norm)
        narrow_diff = (half_plus - half_minus).div_(h)
        # Smooth: (h/2) f'' - (h/2) f'' + O(h³); a kink crossed inside [-h, h]: O(jump).
        asymmetry = half_plus.add(half_minus).sub_(f0, alpha=2).div_(h / 2).sub_(wide_curve)
        del half_plus, half_minus, wide_curve
        size = max(scale, _norm(narrow_diff), _norm(wide_diff))
        if size == 0.0:  # constant along the segment, to the last bit
            return Difference(torch.zeros_like(f0), h, True, "")
        # The rounding of the values, carried into the differences at h/2.
        noise = eps * largest / (h / 2)
        kink = _norm(asymmetry)
        del asymmetry
        if kink > tolerance * size + 8 * noise:
            kinks.append((h, kink))
            reasons.append(KINK)
        elif _norm(wide_diff - narrow_diff) > 3 * tolerance * size:  # D(h/2) off by ~1/3 of it
            reasons.append(DISAGREE)
        else:  # Richardson's extrapolation, (4 D(h/2) - D(h)) / 3
            return Difference(narrow_diff.mul_(4).sub_(wide_diff).div_(3), h, True, "")
        if noise > tolerance * size:  # smaller steps only round more
            break
    if errors and not reasons:  # it raised at every step: the error is the Function's
        raise errors[0]
    if KINK in reasons and not _kink_at_zero(kinks):
        reasons = [
            DISAGREE
        ]  # the asymmetry grew like 1/h: rounding (or a jump), not a kink
    reason = (
        KINK if KINK in reasons else DISAGREE if DISAGREE in reasons else NON_FINITE
    )
    return Difference(None, None, False, reason)


def settled(
    along: Callable[[float], torch.Tensor],
    found: Difference,
    accept: Callable[[torch.Tensor], bool],
    *,
    dtype: torch.dtype,
    tolerance: float | None = None,
    scale: float = 0.0,
) -> Difference:
    """``found``, or where ``accept`` rejects its value, the sweep again from two decades
    finer (``FINER``) if that decides a value ``accept`` takes (``refined``).

    A function piecewise constant on a finer scale than the step (``round(x, decimals=3)``
    at a step of 5e-2 crosses 100 stairs) looks smooth at that step, and at every step down
    to the stairs' width, with the slope of the staircase; below the stairs it is flat, as
    its derivative says. A backward that is wrong gets the same value at the finer step,
    and ``found`` is returned; so it is when no finer step decides: a jump at the point
    itself (every step crosses it) and rounding at the finer steps (a float32 part) look
    alike there, and a wrong backward must not become "undecided" (gradcheck fails at such
    a jump as well). Only a rejected value costs a sweep more.
    """
    if found.value is None or found.step is None or accept(found.value):
        return found
    known = STEPS.get(real_dtype(dtype), ())
    steps = [h for h in known if h <= found.step / FINER] or [
        h for h in known[-1:] if h < found.step
    ]
    if not steps:
        return found
    finer = central_difference(
        along, dtype=dtype, steps=steps, tolerance=tolerance, scale=scale
    )
    if finer.value is not None and accept(finer.value):
        return dataclasses.replace(finer, refined=True)
    return found


def _mutable(value: torch.Tensor) -> torch.Tensor:
    """``value``, or a materialized copy of it if it is one of the read-only zero tensors
    torch returns for a derivative it knows is zero (sgn's second derivative): gradcheck and
    gradgradcheck clone what they differentiate too. Others are not copied (no cost)."""
    return value.clone() if value._is_zerotensor() else value


def _kink_at_zero(kinks: list[tuple[float, float]]) -> bool:
    """Whether the asymmetries seen are those of a kink: O(1), not growing as the step
    shrinks (a kink at t=0 keeps it constant; rounding noise and a jump in the value make it
    grow like 1/h). One step alone cannot tell: it counts as a kink."""
    return len(kinks) < 2 or any(
        small_asym * small_h < 0.3 * large_asym * large_h
        for (large_h, large_asym), (small_h, small_asym) in zip(
            kinks, kinks[1:], strict=False
        )
    )


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t)) if t.numel() else 0.0


def all_finite(t: torch.Tensor, t_norm: float) -> bool:
    """Whether every element of ``t`` is finite, given its norm: a NaN or inf makes the norm
    NaN or inf, so a finite norm answers without a scan of its own (the norm is needed
    anyway); only a norm that overflowed (elements above 1e154) needs the scan."""
    return math.isfinite(t_norm) or bool(torch.isfinite(t).all())
