r"""Replacements for built-ins that have no double backward, differentiable to every order.

Each replaces a torch op whose backward raises when differentiated (measured on torch 2.13 CPU)
and keeps its signature and semantics; what it does not support is refused with a clear error.
They follow the model of StyleGAN2-ADA's ``conv2d_gradfix``: a custom Function whose backward
is built from differentiable operations, using only tensors autograd tracks (the inputs, and
outputs of the Function itself, as :class:`~double_backward.Sinh` returns its intermediates),
so the graph of the backward is itself differentiable, and so on to every order.

- :func:`scaled_dot_product_attention` for ``F.scaled_dot_product_attention``, whose default
  CPU kernel (flash attention) has no double backward; it saves :math:`O(L d)`, not the
  :math:`L \times S` attention matrix the MATH backend keeps;
- :func:`cdist` and :func:`pdist` for ``torch.cdist`` (no double backward below 26 rows, or for
  p ≠ 2) and ``F.pdist``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["cdist", "pdist", "scaled_dot_product_attention"]


def _check_tensor(op: str, name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{op}: '{name}' must be a torch.Tensor, got {type(value).__name__}"
        )
    if not value.is_floating_point():
        raise TypeError(
            f"{op}: '{name}' must be a real floating-point tensor, got dtype {value.dtype}"
        )
    return value


# -- Attention -------------------------------------------------------------------------------


def _scores(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
) -> torch.Tensor:
    """scale · q kᵀ, with the mask applied: bool False → −inf, float added."""
    scores = torch.matmul(q * scale, k.transpose(-2, -1))
    if is_causal:
        length, source_length = scores.shape[-2:]
        # Top-left aligned, as torch's is_causal: query i sees keys 0..i.
        keep = torch.ones(
            length, source_length, dtype=torch.bool, device=scores.device
        ).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    elif mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, -math.inf)
        else:
            scores = scores + mask
    return scores


def _finite(logsumexp: torch.Tensor) -> torch.Tensor:
    """The logsumexp with −inf (a fully masked row) replaced by 0, so exp(−inf − 0) = 0."""
    return torch.where(logsumexp == -math.inf, torch.zeros_like(logsumexp), logsumexp)


class ScaledDotProductAttention(torch.autograd.Function):
    r"""softmax(scale · q kᵀ + mask) v, also returning the row logsumexp of the scores.

    Forward saves q, k, v, the output and the logsumexp :math:`\ell_i = \log \sum_j
    e^{s_{ij}}` (a vector per query): :math:`O((L + S) d)` memory, not the :math:`L \times S`
    probabilities. Backward recomputes :math:`P = e^{S - \ell}` from them and applies, with
    differentiable ops,

    .. math::

        dV = P^\top dO,\quad dS = P \circ (dO\,V^\top - \operatorname{rowsum}(dO \circ O))
        + P \circ d\ell,\quad dQ = \text{scale}\; dS\,K,\quad dK = \text{scale}\; dS^\top Q,

    and dmask = dS for a float mask. The output and the logsumexp are outputs of this
    Function, so they are tracked: the backward's graph reaches q, k, v through them (and
    through this same backward again), which is what makes every order work. Use
    :func:`scaled_dot_product_attention` for the output alone.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Forward is not recorded: the L×S temporaries are freed on return, and in place is safe.
        scores = _scores(q, k, mask, is_causal, scale)
        logsumexp = torch.logsumexp(scores, dim=-1, keepdim=True)
        probabilities = scores.sub_(_finite(logsumexp)).exp_()
        out = torch.matmul(probabilities, v)
        ctx.save_for_backward(q, k, v, mask, out, logsumexp)
        ctx.is_causal, ctx.scale = is_causal, scale
        # An unused output's gradient stays None instead of a tensor of zeros.
        ctx.set_materialize_grads(False)
        return out, logsumexp

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor | None, grad_logsumexp: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, out, logsumexp = ctx.saved_tensors
        scale = ctx.scale
        # Recomputed with differentiable ops from tracked tensors, never saved by forward.
        scores = _scores(q, k, mask, ctx.is_causal, scale)
        probabilities = torch.exp(scores - _finite(logsumexp))
        grad_q = grad_k = grad_v = grad_mask = None
        grad_scores = None
        if grad_out is not None:
            if ctx.needs_input_grad[2]:
                grad_v = torch.matmul(probabilities.transpose(-2, -1), grad_out)
            # rowsum(dO ∘ O) = rowsum(dO Vᵀ ∘ P): the softmax backward without P's row sums.
            row_term = (grad_out * out).sum(dim=-1, keepdim=True)
            grad_scores = probabilities * (
                torch.matmul(grad_out, v.transpose(-2, -1)) - row_term
            )
        if grad_logsumexp is not None:
            # ∂ℓ_i/∂s_ij = P_ij: the second backward sends gradients through here.
            from_logsumexp = probabilities * grad_logsumexp
            grad_scores = (
                from_logsumexp if grad_scores is None else grad_scores + from_logsumexp
            )
        if grad_scores is not None:
            if ctx.needs_input_grad[0]:
                grad_q = torch.matmul(grad_scores, k) * scale
            if ctx.needs_input_grad[1]:
                grad_k = torch.matmul(grad_scores.transpose(-2, -1), q) * scale
            if ctx.needs_input_grad[3]:
                grad_mask = grad_scores.sum_to_size(mask.shape)
        return grad_q, grad_k, grad_v, grad_mask, None, None


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    r"""``F.scaled_dot_product_attention`` that can be differentiated to every order.

    Same arguments and result as the torch op: ``query`` (..., L, E), ``key`` (..., S, E),
    ``value`` (..., S, Ev), batch dimensions broadcast; ``attn_mask`` boolean (True: take
    part) or floating (added to the scores), broadcastable to (..., L, S), and differentiable
    when it requires grad; ``is_causal`` masks with the top-left lower triangle; ``scale``
    defaults to :math:`1/\sqrt{E}`; ``enable_gqa`` repeats key and value heads (dim -3) to
    match the query's.

    A query whose every key is masked gets an output of zeros and zero gradients, as torch's
    MATH and default CPU kernels give (not the NaN of a plain softmax).

    Refused: ``dropout_p`` other than 0 (the dropout mask would have to be saved or replayed
    exactly for the second backward); ``attn_mask`` together with ``is_causal=True`` (torch
    refuses it too); masks of another dtype than
    bool, float32 or the query's.

    Memory: forward keeps q, k, v, the output and one logsumexp per query (see
    :class:`ScaledDotProductAttention`); backward recomputes the attention matrix.
    """
    op = "scaled_dot_product_attention"
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        _check_tensor(op, name, tensor)
        if tensor.dim() < 2:
            raise ValueError(
                f"{op}: '{name}' must have at least 2 dimensions (..., length, features), "
                f"got shape {tuple(tensor.shape)}"
            )
    if dropout_p != 0.0:
        raise ValueError(
            f"{op}: dropout_p must be 0.0, got {dropout_p}. This replacement has no dropout: "
            "the second backward would need the exact dropout mask. Apply dropout to the "
            "output, or use torch's op where no double backward is needed."
        )
    if attn_mask is not None and is_causal:
        raise ValueError(
            f"{op}: pass either attn_mask or is_causal=True, not both (torch refuses it too: "
            "'Explicit attn_mask should not be set when is_causal=True')"
        )
    if query.dtype != key.dtype or query.dtype != value.dtype:
        raise TypeError(
            f"{op}: query, key and value must have one dtype, got {query.dtype}, "
            f"{key.dtype} and {value.dtype}"
        )
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"{op}: expected query (..., L, E), key (..., S, E), value (..., S, Ev), got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(
                f"{op}: attn_mask must be a torch.Tensor, got {type(attn_mask).__name__}"
            )
        # The dtypes torch takes: bool, float32, or the query's dtype.
        if attn_mask.dtype not in (torch.bool, torch.float32, query.dtype):
            raise TypeError(
                f"{op}: attn_mask must be bool (True: take part) or float32 or the query's "
                f"dtype {query.dtype} (added to the scores), got dtype {attn_mask.dtype}"
            )
        if attn_mask.is_floating_point() and attn_mask.dtype != query.dtype:
            attn_mask = attn_mask.to(query.dtype)
    if enable_gqa:
        key, value = _repeat_heads(op, query, key, value)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    # Broadcast the batch dimensions outside the Function: expand is a view, and autograd sums
    # the gradients back to each input's shape.
    try:
        batch = torch.broadcast_shapes(
            query.shape[:-2], key.shape[:-2], value.shape[:-2]
        )
    except RuntimeError:
        raise ValueError(
            f"{op}: the batch dimensions {tuple(query.shape[:-2])}, {tuple(key.shape[:-2])} "
            f"and {tuple(value.shape[:-2])} of query, key and value do not broadcast"
        ) from None
    if attn_mask is not None:
        try:
            torch.broadcast_shapes(
                attn_mask.shape, (*batch, query.shape[-2], key.shape[-2])
            )
        except RuntimeError:
            raise ValueError(
                f"{op}: attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
                f"(..., L, S) = {(*batch, query.shape[-2], key.shape[-2])}"
            ) from None
        batch = torch.broadcast_shapes(batch, attn_mask.shape[:-2])
    query, key, value = (t.expand(*batch, *t.shape[-2:]) for t in (query, key, value))
    out, _ = ScaledDotProductAttention.apply(
        query, key, value, attn_mask, is_causal, scale
    )
    return out


def _repeat_heads(
    op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if min(query.dim(), key.dim(), value.dim()) < 3:
        raise ValueError(
            f"{op}: enable_gqa needs a heads dimension (dim -3) in every input"
        )
    heads, key_heads = query.shape[-3], key.shape[-3]
    if key_heads != value.shape[-3] or heads % key_heads:
        raise ValueError(
            f"{op}: enable_gqa needs the query's heads ({heads}) to be a multiple of the "
            f"key's and value's ({key_heads}, {value.shape[-3]})"
        )
    repeats = heads // key_heads
    return key.repeat_interleave(repeats, -3), value.repeat_interleave(repeats, -3)


# -- Distances -------------------------------------------------------------------------------


class Cdist(torch.autograd.Function):
    r"""The p-norm distances :math:`d_{ij} = \lVert x_{1,i} - x_{2,j} \rVert_p`, p ≥ 1 or ∞.

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
      coordinate in full, as torch does). This backward holds (…, P, R, M) temporaries.

    At distance 0 (coincident points) the norm has no derivative. The pair then contributes 0
    to the gradient (the subgradient torch's cdist also picks) and 0 to every higher
    derivative: ``where`` masks both the division by d and, for p ≠ 2, each coordinate
    difference that is exactly 0 (whose second derivative is infinite for 1 < p < 2).
    """

    @staticmethod
    def forward(ctx: Any, x1: torch.Tensor, x2: torch.Tensor, p: float) -> torch.Tensor:
        distances = torch.cdist(
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
    if not number or math.isnan(p) or p < 1:
        raise ValueError(
            f"{op}: p must be a number >= 1 or math.inf, got {p!r}. Below 1 the p-norm is "
            "not a norm, and its derivative is infinite wherever a coordinate difference is 0."
        )
    return float(p)


def cdist(x1: torch.Tensor, x2: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    r"""``torch.cdist`` that can be differentiated to every order, at every size.

    ``x1`` (..., P, M) and ``x2`` (..., R, M), batch dimensions broadcast; returns the
    (..., P, R) p-norm distances, p ≥ 1 or ``math.inf``. torch's own cdist has no double
    backward below 26 rows (its default switches to a matrix-product formula above 25) and
    none for p ≠ 2 at any size; this one has every order at every size.

    **At distance 0** (a point of x1 equal to one of x2) the derivative is taken as 0: the pair
    contributes 0 to the gradient (torch's choice for the first order too) and 0 to the
    Hessian and every higher derivative. For p ≠ 2 a coordinate difference of exactly 0
    likewise contributes 0 beyond the first order; that is exact for p = 1, p > 2 and ∞, and a
    choice for 1 < p < 2, where the true second derivative there is infinite. See
    :class:`Cdist` for the formulas and the memory the backward uses.
    """
    op = "cdist"
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
