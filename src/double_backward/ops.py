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
- :func:`cdist` and :func:`pdist` for ``torch.cdist`` (no double backward for p = 2 when
  neither input has more than 25 rows, or for p ≠ 2) and ``F.pdist``;
- :func:`ctc_loss` for ``F.ctc_loss``, whose native backward has no derivative (cuDNN's
  kernel is CUDA only): a log-space recursion of differentiable ops (no custom Function), so
  autograd gives every order.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["cdist", "ctc_loss", "pdist", "scaled_dot_product_attention"]


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


#: Scores the blocked loops compute at a time (4 MB in float32): no L×S buffer is allocated,
#: and the blocks are tall enough for efficient matrix products (a quarter of this made
#: forward + backward 1.5 times as slow at L = 1024, 16 heads, torch 2.13 CPU).
BLOCK_ELEMENTS = 1 << 20


def _mask_in_place(
    scores: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    start: int,
) -> torch.Tensor:
    """Mask the scores of queries start, start + 1, …: bool False → −inf, float added.

    In place, also when autograd records it: the product that made the scores needs its
    inputs for backward, not its output, and neither ``masked_fill_`` nor ``add_`` saves it.
    """
    if is_causal:
        rows, columns = scores.shape[-2:]
        # Top-left aligned, as torch's is_causal: query i sees keys 0..i.
        ones = torch.ones(rows, columns, dtype=torch.bool, device=scores.device)
        mask = ones.tril(start)
    elif mask is not None and mask.dim() >= 2 and mask.shape[-2] != 1:
        mask = mask[..., start : start + scores.shape[-2], :]
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill_(~mask, -math.inf)
    return scores.add_(mask)


def _scores(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
) -> torch.Tensor:
    """scale · q kᵀ, masked."""
    return _mask_in_place(
        torch.matmul(q * scale, k.transpose(-2, -1)), mask, is_causal, 0
    )


def _finite(logsumexp: torch.Tensor) -> torch.Tensor:
    """The logsumexp with −inf (a fully masked row) replaced by 0, so exp(−inf − 0) = 0."""
    return torch.where(logsumexp == -math.inf, torch.zeros_like(logsumexp), logsumexp)


class _Blocks:
    """q, k, v as (batch, length, features) tensors, and the scores a block of queries at a time.

    Used where nothing is recorded (forward, and a backward without create_graph): each block's
    scores go into a buffer that the next block reuses, so the loop allocates no fresh memory.
    """

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        scale: float,
    ) -> None:
        self.batch = q.shape[:-2]
        self.flat = self.batch.numel()
        self.q, self.k, self.v = (
            t.reshape(self.flat, *t.shape[-2:]) for t in (q, k, v)
        )
        self.length, self.source_length = q.shape[-2], k.shape[-2]
        self.mask, self.is_causal, self.scale = mask, is_causal, scale
        per_row = max(1, self.flat * self.source_length)
        self.rows = max(1, min(self.length, BLOCK_ELEMENTS // per_row))

    def starts(self) -> range:
        return range(0, self.length, self.rows)

    def buffer(self) -> torch.Tensor:
        return self.q.new_empty(self.flat, self.rows, self.source_length)

    def scores(self, start: int, buffer: torch.Tensor) -> torch.Tensor:
        """The masked scores of the block of queries from start, in buffer if it fits."""
        rows = min(self.rows, self.length - start)
        if buffer.shape[1] != rows:  # the last, shorter block
            buffer = buffer.new_empty(self.flat, rows, self.source_length)
        q_block = self.q[:, start : start + rows] * self.scale
        torch.bmm(q_block, self.k.transpose(1, 2), out=buffer)
        view = buffer.view(*self.batch, rows, self.source_length)
        _mask_in_place(view, self.mask, self.is_causal, start)
        return buffer

    def unflatten(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.view(*self.batch, *tensor.shape[1:])


class ScaledDotProductAttention(torch.autograd.Function):
    r"""softmax(scale · q kᵀ + mask) v, also returning the row logsumexp of the scores.

    Forward saves q, k, v, the output and the logsumexp :math:`\ell_i = \log \sum_j
    e^{s_{ij}}` (a vector per query): :math:`O((L + S) d)` memory, not the :math:`L \times S`
    probabilities. Backward recomputes :math:`P = e^{S - \ell}` from them and applies

    .. math::

        dV = P^\top dO,\quad dS = P \circ (dO\,V^\top - \operatorname{rowsum}(dO \circ O))
        + P \circ d\ell,\quad dQ = \text{scale}\; dS\,K,\quad dK = \text{scale}\; dS^\top Q,

    and dmask = dS for a float mask. When the backward is recorded (``create_graph=True``) it
    runs these formulas in differentiable ops. The output and the logsumexp are outputs of
    this Function, so they are tracked: the backward's graph reaches q, k, v through them (and
    through this same backward again), which is what makes every order work. When it is not
    recorded (a plain ``backward()``, or this backward reached again from a second backward),
    the same formulas run in place, a block of queries at a time, as forward does. Use
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
        # Forward is not recorded: each block's scores are overwritten in place.
        blocks = _Blocks(q, k, v, mask, is_causal, scale)
        buffer = blocks.buffer()
        out = q.new_empty(blocks.flat, blocks.length, v.shape[-1])
        logsumexp = q.new_empty(blocks.flat, blocks.length, 1)
        for start in blocks.starts():
            scores = blocks.scores(start, buffer)
            stop = start + scores.shape[1]
            row_max = _finite(scores.amax(dim=-1, keepdim=True))
            weights = scores.sub_(row_max).exp_()
            total = weights.sum(dim=-1, keepdim=True)
            empty = total == 0  # a fully masked query: output 0, logsumexp −inf
            out[:, start:stop] = torch.bmm(weights, blocks.v) / torch.where(
                empty, 1.0, total
            )
            logsumexp[:, start:stop] = torch.where(
                empty, -math.inf, row_max + torch.log(total)
            )
        out, logsumexp = blocks.unflatten(out), blocks.unflatten(logsumexp)
        ctx.save_for_backward(q, k, v, mask, out, logsumexp)
        ctx.is_causal, ctx.scale = is_causal, scale
        # An unused output's gradient stays None instead of a tensor of zeros.
        ctx.set_materialize_grads(False)
        return out, logsumexp

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor | None, grad_logsumexp: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        if torch.is_grad_enabled():
            return _recorded_backward(ctx, grad_out, grad_logsumexp)
        return _blocked_backward(ctx, grad_out, grad_logsumexp)


def _recorded_backward(
    ctx: Any, grad_out: torch.Tensor | None, grad_logsumexp: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    """The backward in differentiable ops on tracked tensors: autograd records it whole."""
    q, k, v, mask, out, logsumexp = ctx.saved_tensors
    scale = ctx.scale
    # Recomputed from tracked tensors, never saved by forward. In place where autograd
    # allows it (exp_ saves its result, which nothing modifies after): two fewer L×S buffers.
    scores = _scores(q, k, mask, ctx.is_causal, scale)
    probabilities = scores.sub_(_finite(logsumexp)).exp_()
    grad_q = grad_k = grad_v = grad_mask = None
    grad_scores = None
    if grad_out is not None:
        if ctx.needs_input_grad[2]:
            grad_v = torch.matmul(probabilities.transpose(-2, -1), grad_out)
        # rowsum(dO ∘ O) = rowsum(dO Vᵀ ∘ P): the softmax backward without P's row sums.
        row_term = (grad_out * out).sum(dim=-1, keepdim=True)
        grad_probabilities = torch.matmul(grad_out, v.transpose(-2, -1))
        grad_scores = probabilities * grad_probabilities.sub_(row_term)
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


def _blocked_backward(
    ctx: Any, grad_out: torch.Tensor | None, grad_logsumexp: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    """The same formulas, not recorded: in place, a block of queries at a time."""
    q, k, v, mask, out, logsumexp = ctx.saved_tensors
    needs_q, needs_k, needs_v, needs_mask = ctx.needs_input_grad[:4]
    if grad_out is None and grad_logsumexp is None:
        return None, None, None, None, None, None
    blocks = _Blocks(q, k, v, mask, ctx.is_causal, ctx.scale)
    flat, length, source_length = blocks.flat, blocks.length, blocks.source_length
    scores_buffer = blocks.buffer()
    logsumexp = _finite(logsumexp).reshape(flat, length, 1)
    if grad_out is not None:
        grad_buffer = blocks.buffer()
        row_term = (grad_out * out).sum(dim=-1, keepdim=True).reshape(flat, length, 1)
        grad_out = grad_out.reshape(flat, length, -1)
    if grad_logsumexp is not None:
        grad_logsumexp = grad_logsumexp.reshape(flat, length, 1)
    grad_q = blocks.q.new_empty(blocks.q.shape) if needs_q else None
    grad_k = blocks.k.new_zeros(blocks.k.shape) if needs_k else None
    grad_v = (
        blocks.v.new_zeros(blocks.v.shape) if needs_v and grad_out is not None else None
    )
    grad_mask = blocks.q.new_empty(flat, length, source_length) if needs_mask else None
    for start in blocks.starts():
        probabilities = blocks.scores(start, scores_buffer)
        stop = start + probabilities.shape[1]
        probabilities.sub_(logsumexp[:, start:stop]).exp_()
        if grad_out is not None:
            grad_out_block = grad_out[:, start:stop]
            if grad_v is not None:
                grad_v.baddbmm_(probabilities.transpose(1, 2), grad_out_block)
            grad_scores = grad_buffer
            if grad_scores.shape[1] != probabilities.shape[1]:
                grad_scores = torch.empty_like(probabilities)
            torch.bmm(grad_out_block, blocks.v.transpose(1, 2), out=grad_scores)
            grad_scores.sub_(row_term[:, start:stop]).mul_(probabilities)
            if grad_logsumexp is not None:
                grad_scores.addcmul_(probabilities, grad_logsumexp[:, start:stop])
        else:
            grad_scores = probabilities.mul_(grad_logsumexp[:, start:stop])
        if needs_q:
            grad_q[:, start:stop] = torch.bmm(grad_scores, blocks.k).mul_(ctx.scale)
        if needs_k:
            grad_k.baddbmm_(
                grad_scores.transpose(1, 2), blocks.q[:, start:stop], alpha=ctx.scale
            )
        if needs_mask:
            grad_mask[:, start:stop] = grad_scores
    if needs_mask:
        grad_mask = blocks.unflatten(grad_mask).sum_to_size(mask.shape)
    grad_q, grad_k, grad_v = (
        None if grad is None else blocks.unflatten(grad)
        for grad in (grad_q, grad_k, grad_v)
    )
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
    (..., P, R) p-norm distances, p ≥ 1 or ``math.inf``. torch's own cdist (2.13) has no double
    backward for p = 2 unless an input has more than 25 rows (then its default switches to a
    matrix-product formula), and none for p ≠ 2 at any size; this one has every order at every size.

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


# -- CTC loss --------------------------------------------------------------------------------

#: Log-probability of an unreachable state: finite, so that no −inf − (−inf) = nan reaches a
#: gradient, and far below any reachable path (whose log-probability is a sum of T terms).
_UNREACHABLE = -1e30


def _as_lengths(op: str, name: str, value: Any, batch: int) -> torch.Tensor:
    lengths = torch.as_tensor(value, dtype=torch.long).reshape(-1)
    if lengths.numel() != batch:
        raise ValueError(
            f"{op}: {name} must hold one length per batch element ({batch}), got "
            f"{lengths.numel()}"
        )
    return lengths


def ctc_loss(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> torch.Tensor:
    r"""``F.ctc_loss`` as a log-space recursion of differentiable ops: every order works.

    Same arguments as the torch op: ``log_probs`` (T, N, C) or (T, C) log-probabilities;
    ``targets`` padded (N, S) or concatenated (sum of target_lengths); lengths as tensors or
    sequences; ``reduction`` ``"none"``, ``"sum"`` or ``"mean"`` (each loss divided by its
    target length, then averaged). An impossible alignment gives ``inf``, or 0 with
    ``zero_infinity=True``, as in torch.

    Why a recursion and not a backend choice: torch's native backward, ``_ctc_loss_backward``,
    has no derivative (``derivative for aten::_ctc_loss_backward is not implemented``,
    measured on torch 2.13 CPU). The cuDNN kernel, CUDA only and so not measured here,
    computes the gradient inside its forward and its backward scales that saved tensor
    (``CudnnCtcLossBackward0`` keeps ``result1`` in torch 2.13's generated autograd code); on
    the CPU there is no other backend. The forward (α) recursion of Graves et al. (2006),

    .. math::

        \alpha_t(s) = \log\!\big(e^{\alpha_{t-1}(s)} + e^{\alpha_{t-1}(s-1)}
        + [\ell'_s \ne b,\ \ell'_s \ne \ell'_{s-2}]\, e^{\alpha_{t-1}(s-2)}\big)
        + \log p_t(\ell'_s),

    written with ``torch.logsumexp``, is differentiable by autograd to every order. The cost:
    a Python loop over the T time steps, and autograd keeps each step's (N, 2S + 1) states,
    O(T·N·S) memory. For first-order training torch's kernel is the faster: forward +
    backward at T=100, N=8, C=30, S=20, float32, one thread took 24-28 ms here against its
    3 ms (torch 2.13 CPU, 2 shared cores).

    **Gradient convention**: this returns the true gradient with respect to ``log_probs``.
    torch's own CTC backward returns it plus :math:`p_t(c) \cdot \partial L/\partial
    \text{loss}`, a term that vanishes through ``log_softmax`` (its backward removes any
    multiple of the probabilities). So gradients with respect to the logits fed to
    ``log_softmax`` agree with torch's; those with respect to ``log_probs`` do not.
    """
    op = "ctc_loss"
    _check_tensor(op, "log_probs", log_probs)
    if log_probs.dtype not in (torch.float32, torch.float64):
        # The unreachable states' −1e30 would overflow to −inf, and −inf − (−inf) is nan.
        raise TypeError(
            f"{op}: log_probs must be float32 or float64 (as torch's CPU kernel takes), got "
            f"{log_probs.dtype}"
        )
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(
            f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}"
        )
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
    if log_probs.dim() != 3:
        raise ValueError(
            f"{op}: log_probs must be (T, N, C) or (T, C), got shape {tuple(log_probs.shape)}"
        )
    steps, batch, classes = log_probs.shape
    input_lengths = _as_lengths(op, "input_lengths", input_lengths, batch)
    target_lengths = _as_lengths(op, "target_lengths", target_lengths, batch)
    if not 0 <= blank < classes:
        raise ValueError(
            f"{op}: blank must be a class index in [0, {classes}), got {blank}"
        )
    if (input_lengths < 1).any() or (input_lengths > steps).any():
        raise ValueError(
            f"{op}: input_lengths must be between 1 and T = {steps}, got "
            f"{input_lengths.tolist()}"
        )
    if targets.dim() == 1:  # concatenated: pad into (N, S)
        pieces = targets.split(target_lengths.tolist())
        targets = torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True)
    if targets.shape[0] != batch or (target_lengths > targets.shape[1]).any():
        raise ValueError(
            f"{op}: targets of shape {tuple(targets.shape)} do not hold target_lengths "
            f"{target_lengths.tolist()} for {batch} batch elements"
        )
    device = log_probs.device
    targets = targets.to(device=device, dtype=torch.long)
    input_lengths, target_lengths = input_lengths.to(device), target_lengths.to(device)

    # The extended labels: blank, l1, blank, l2, ..., blank (padding labels are unreachable).
    states = 2 * targets.shape[1] + 1
    extended = torch.full((batch, states), blank, dtype=torch.long, device=device)
    extended[:, 1::2] = targets
    position = torch.arange(states, device=device)
    skip = torch.zeros_like(extended, dtype=torch.bool)
    skip[:, 2:] = (extended[:, 2:] != blank) & (extended[:, 2:] != extended[:, :-2])
    unreachable = torch.full(
        (batch, 1), _UNREACHABLE, dtype=log_probs.dtype, device=device
    )

    def emissions(t: int) -> torch.Tensor:
        return log_probs[t].gather(1, extended)

    first = (position == 0) | ((position == 1) & (target_lengths > 0).unsqueeze(1))
    alpha = torch.where(first, emissions(0), unreachable)
    for t in range(1, steps):
        from_previous = torch.cat((unreachable, alpha[:, :-1]), dim=1)
        from_skip = torch.cat((unreachable, unreachable, alpha[:, :-2]), dim=1)
        from_skip = torch.where(skip, from_skip, unreachable)
        stepped = torch.logsumexp(torch.stack((alpha, from_previous, from_skip)), dim=0)
        stepped = stepped + emissions(t)
        # Sequences already at their end keep their final states.
        alpha = torch.where((t < input_lengths).unsqueeze(1), stepped, alpha)

    last = alpha.gather(1, (2 * target_lengths).unsqueeze(1))
    last_label = alpha.gather(1, (2 * target_lengths - 1).clamp(min=0).unsqueeze(1))
    last_label = torch.where((target_lengths > 0).unsqueeze(1), last_label, unreachable)
    log_likelihood = torch.logsumexp(torch.cat((last, last_label), dim=1), dim=1)
    impossible = log_likelihood < _UNREACHABLE / 2
    losses = torch.where(
        impossible,
        torch.zeros_like(log_likelihood) if zero_infinity else math.inf,
        -log_likelihood,
    )
    if reduction == "none":
        return losses[0] if unbatched else losses
    if reduction == "sum":
        return losses.sum()
    return (losses / target_lengths.clamp(min=1).to(losses.dtype)).mean()
