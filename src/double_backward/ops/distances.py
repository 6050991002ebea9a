r"""``torch.cdist`` and ``F.pdist`` with every derivative, at every size and p.

torch 2.13's cdist has no double backward for p = 2 when neither input has more than 25 rows,
nor for p ≠ 2; its pdist has none at all.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._checks import _check_tensor

__all__ = ["Cdist", "cdist", "pdist"]

#: torch's own cdist, bound at import: ``replaced()`` points ``torch.cdist`` at :func:`cdist`,
#: whose forward runs this.
_torch_cdist = torch.cdist


class Cdist(torch.autograd.Function):
    r"""The p-norm distances :math:`d_{ij} = \lVert x_{1,i} - x_{2,j} \rVert_p`, p ≥ 0 or ∞.

    Forward runs torch's own kernel (not recorded, so its missing double backward does not
    matter) and saves x1, x2 and the distances, the output: it is tracked, so a backward
    built from it has a graph back to x1 and x2. Backward, with :math:`g = \partial L /
    \partial d`, in differentiable ops:

    - p = 2: :math:`G = g / d`, :math:`\nabla x_1 = x_1 \operatorname{rowsum}(G) - G x_2`,
      :math:`\nabla x_2 = x_2 \operatorname{colsum}(G) - G^\top x_1` (matrix products, no
      (P, R, M) tensor);
    - otherwise :math:`\nabla x_1 = \sum_j g_{ij} w_{ij}`, :math:`\nabla x_2 = -\sum_i g_{ij}
      w_{ij}`, with :math:`w = \operatorname{sign}(\delta)\,(|\delta| / d)^{p-1}` for the
      differences :math:`\delta = x_{1,i} - x_{2,j}` (p = 1: :math:`\operatorname{sign}
      \delta`; p = ∞: :math:`\operatorname{sign}\delta` where :math:`|\delta| = d`, every tied
      coordinate in full, as torch does). This backward holds (…, P, R, M) temporaries;
    - p = 0, the count of coordinates that differ: a step function, whose derivative is 0
      wherever it has one; every derivative is 0, as torch's cdist gives for the first.

    At distance 0 (coincident points) the norm has no derivative. The pair then contributes 0
    to the gradient (the subgradient torch's cdist also picks) and 0 to every higher
    derivative: ``where`` masks both the division by d and, for p ≠ 2, each coordinate
    difference that is exactly 0 (whose first derivative is infinite for 0 < p < 1, and its
    second for 1 < p < 2; torch's cdist also takes 0 there for the first).
    """

    @staticmethod
    def forward(ctx: Any, x1: torch.Tensor, x2: torch.Tensor, p: float) -> torch.Tensor:
        distances = _torch_cdist(
            x1, x2, p=p, compute_mode="donot_use_mm_for_euclid_dist"
        )
        ctx.save_for_backward(x1, x2, distances)
        ctx.p = p
        return distances

    @staticmethod
    def backward(
        ctx: Any, grad_distances: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x1, x2, distances = ctx.saved_tensors
        p = ctx.p
        if p == 0:  # a count: constant wherever it is differentiable
            return (
                torch.zeros_like(x1) if ctx.needs_input_grad[0] else None,
                torch.zeros_like(x2) if ctx.needs_input_grad[1] else None,
                None,
            )
        coincident = distances == 0
        # where() on both sides: no 1/0 computed, so no 0 · inf = nan in the next backward.
        safe_distances = torch.where(coincident, torch.ones_like(distances), distances)
        grad_x1 = grad_x2 = None
        if p == 2:
            scaled = torch.where(
                coincident, torch.zeros_like(distances), grad_distances / safe_distances
            )
            if ctx.needs_input_grad[0]:
                grad_x1 = x1 * scaled.sum(-1, keepdim=True) - scaled @ x2
            if ctx.needs_input_grad[1]:
                grad_x2 = (
                    x2 * scaled.sum(-2).unsqueeze(-1) - scaled.transpose(-2, -1) @ x1
                )
            return grad_x1, grad_x2, None
        difference = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, R, M)
        if p == 1:
            weights = torch.sign(difference)
        elif p == math.inf:
            at_max = difference.abs() == distances.unsqueeze(-1)
            weights = torch.sign(difference) * at_max
        else:
            magnitude = difference.abs()
            safe_magnitude = torch.where(
                difference == 0, torch.ones_like(magnitude), magnitude
            )
            ratio = safe_magnitude / safe_distances.unsqueeze(-1)
            weights = torch.sign(difference) * ratio.pow(p - 1)
        weighted = grad_distances.unsqueeze(-1) * weights
        if ctx.needs_input_grad[0]:
            grad_x1 = weighted.sum(-2)
        if ctx.needs_input_grad[1]:
            grad_x2 = -weighted.sum(-3)
        return grad_x1, grad_x2, None


def _check_p(op: str, p: Any) -> float:
    number = isinstance(p, (int, float)) and not isinstance(p, bool)
    if not number or math.isnan(p) or p < 0:
        raise ValueError(
            f"{op}: p must be a number >= 0 or math.inf, as torch takes, got {p!r}"
        )
    return float(p)


#: The compute modes torch.cdist takes: accepted and ignored here (one formula at every size).
COMPUTE_MODES = (
    "use_mm_for_euclid_dist_if_necessary",
    "use_mm_for_euclid_dist",
    "donot_use_mm_for_euclid_dist",
)


def cdist(
    x1: torch.Tensor,
    x2: torch.Tensor,
    p: float = 2.0,
    compute_mode: str = "use_mm_for_euclid_dist_if_necessary",
) -> torch.Tensor:
    r"""``torch.cdist`` that can be differentiated to every order, at every size.

    ``x1`` (..., P, M) and ``x2`` (..., R, M), batch dimensions broadcast; returns the
    (..., P, R) distances :math:`(\sum_k |x_{1,ik} - x_{2,jk}|^p)^{1/p}` for every p torch's
    cdist takes: p ≥ 0 or ``math.inf`` (p = 0 counts the coordinates that differ; below 1 it
    is not a norm, but the same formula). torch's own cdist (2.13) has no double backward for
    p = 2 unless an input has more than 25 rows (then its default switches to a matrix-product
    formula), and none for p ≠ 2 at any size; this one has every order at every size, for every
    p.

    **At distance 0** (a point of x1 equal to one of x2) the derivative is taken as 0: the pair
    contributes 0 to the gradient (torch's choice for the first order too) and 0 to the
    Hessian and every higher derivative. For p ≠ 2 a coordinate difference of exactly 0
    likewise contributes 0 beyond the first order; that is exact for p = 1, p > 2 and ∞, and a
    choice for 1 < p < 2, where the true second derivative there is infinite. For 0 < p < 1
    such a difference contributes 0 already to the gradient, where the true derivative is
    infinite: torch's cdist makes the same choice. For p = 0 every derivative is 0. See
    :class:`Cdist` for the formulas and the memory the backward uses.

    ``compute_mode`` takes torch's values and changes nothing: the distances are computed
    directly (torch's ``"donot_use_mm_for_euclid_dist"``) at every size, and the backward is
    the same formula whichever route torch's would have taken.
    """
    op = "cdist"
    if compute_mode not in COMPUTE_MODES:
        raise ValueError(
            f"{op}: compute_mode must be one of {list(COMPUTE_MODES)}, got {compute_mode!r}"
        )
    _check_tensor(op, "x1", x1)
    _check_tensor(op, "x2", x2)
    p = _check_p(op, p)
    if x1.dim() < 2 or x2.dim() < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ValueError(
            f"{op}: expected x1 (..., P, M) and x2 (..., R, M) with the same M, got "
            f"{tuple(x1.shape)} and {tuple(x2.shape)}"
        )
    if x1.dtype != x2.dtype:
        raise TypeError(
            f"{op}: x1 and x2 must have one dtype, got {x1.dtype} and {x2.dtype}"
        )
    try:
        batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"{op}: the batch dimensions {tuple(x1.shape[:-2])} and "
            f"{tuple(x2.shape[:-2])} of x1 and x2 do not broadcast"
        ) from None
    # Broadcast outside the Function: autograd sums the gradients back to each input's shape.
    x1 = x1.expand(*batch, *x1.shape[-2:])
    x2 = x2.expand(*batch, *x2.shape[-2:])
    return Cdist.apply(x1, x2, p)


def pdist(input: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    """``F.pdist`` that can be differentiated to every order.

    ``input`` (N, M); returns the N(N−1)/2 distances between rows i < j, in the order torch
    gives them (row by row). Computed as :func:`cdist` of ``input`` with itself, upper
    triangle, so its derivatives are cdist's: 0 at coincident rows, to every order. Memory:
    the full N × N distance matrix, twice what torch's pdist keeps.
    """
    op = "pdist"
    _check_tensor(op, "input", input)
    p = _check_p(op, p)
    if input.dim() != 2:
        raise ValueError(
            f"{op}: input must be 2-D (N, M), as torch's pdist takes, got shape "
            f"{tuple(input.shape)}"
        )
    rows, columns = torch.triu_indices(
        input.shape[0], input.shape[0], offset=1, device=input.device
    )
    return Cdist.apply(input, input, p)[rows, columns]
