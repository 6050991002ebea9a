r"""``F.scaled_dot_product_attention`` with every derivative, memory O((L + S) d).

:func:`scaled_dot_product_attention` replaces the torch op, whose fused kernels (CPU flash,
and CUDA flash, efficient and cuDNN) have no double backward; it saves :math:`O(L d)`, not the
:math:`L \times S` attention matrix the MATH backend keeps.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._checks import _check_tensor

__all__ = [
    "ScaledDotProductAttention",
    "block_elements",
    "scaled_dot_product_attention",
]


#: Scores the blocked loops compute at a time on the CPU (4 MB in float32): no L×S buffer is
#: allocated, and the blocks are tall enough for efficient matrix products (a quarter of this
#: made forward + backward 1.5 times as slow at L = 1024, 16 heads, torch 2.13 CPU).
BLOCK_ELEMENTS = 1 << 20

#: The most scores computed at a time on CUDA. Blocks of 2**20 scores left an H200 idle
#: between small kernels: forward + backward took 510 ms against 20.5 ms with blocks of 2**27
#: (B=4, H=16, L=4096, d=64, bfloat16, torch 2.11.0+cu130; issue 28's measurements).
CUDA_BLOCK_ELEMENTS = 1 << 27

#: The share of the GPU's free memory the blocked loops' buffers may take.
CUDA_FREE_MEMORY_SHARE = 0.25

#: Buffers of one block's size the loops hold at once: the scores, their gradient, and one
#: temporary a matrix product or an exp may allocate.
_BUFFERS = 3


def block_elements(device: torch.device, element_size: int = 4) -> int:
    """How many scores the blocked loops compute at a time on ``device``.

    On the CPU, ``BLOCK_ELEMENTS`` (2**20, tuned on the CPU). On CUDA,
    ``CUDA_BLOCK_ELEMENTS`` (2**27), fewer where the loops' three buffers (``element_size``
    bytes a score) would take more than ``CUDA_FREE_MEMORY_SHARE`` (a quarter) of the free
    memory ``torch.cuda.mem_get_info`` reports, and never fewer than on the CPU. Other devices
    (``meta`` included) get the CPU's size. (Constants of ``double_backward.ops.attention``.)
    """
    if device.type != "cuda":
        return BLOCK_ELEMENTS
    free, _total = torch.cuda.mem_get_info(device)
    fits = int(free * CUDA_FREE_MEMORY_SHARE) // (_BUFFERS * element_size)
    return max(BLOCK_ELEMENTS, min(CUDA_BLOCK_ELEMENTS, fits))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs, as fused kernels keep softmax statistics and sums."""
    return torch.promote_types(dtype, torch.float32)


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
    Half-precision q, k, v are copied to float32 (O((L + S) d) memory, not saved), so that the
    scores, the softmax statistics and every sum are float32, as in fused kernels.
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
        self.dtype = _compute_dtype(q.dtype)
        self.q, self.k, self.v = (
            t.reshape(self.flat, *t.shape[-2:]).to(self.dtype) for t in (q, k, v)
        )
        self.length, self.source_length = q.shape[-2], k.shape[-2]
        self.mask, self.is_causal, self.scale = mask, is_causal, scale
        per_row = max(1, self.flat * self.source_length)
        elements = block_elements(q.device, self.q.element_size())
        self.rows = max(1, min(self.length, elements // per_row))

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

    For bfloat16 and float16 inputs, forward and the unrecorded backward compute the scores,
    the softmax statistics and every sum in float32 (the output and the gradients come back
    in the inputs' dtype, the logsumexp stays float32); the recorded backward runs in the
    inputs' dtype. The block size follows the device: :func:`block_elements`.
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
        out = blocks.q.new_empty(blocks.flat, blocks.length, v.shape[-1])
        logsumexp = blocks.q.new_empty(blocks.flat, blocks.length, 1)
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
        # The output in the inputs' dtype; the logsumexp stays float32 (half inputs).
        out, logsumexp = blocks.unflatten(out).to(q.dtype), blocks.unflatten(logsumexp)
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
        # (The logsumexp is float32 for half-precision inputs: back to their dtype.)
        from_logsumexp = probabilities * grad_logsumexp.to(probabilities.dtype)
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
    logsumexp = _finite(logsumexp).reshape(flat, length, 1).to(blocks.dtype)
    if grad_out is not None:
        grad_buffer = blocks.buffer()
        grad_out = grad_out.to(blocks.dtype)
        row_term = (grad_out * out.to(blocks.dtype)).sum(dim=-1, keepdim=True)
        row_term = row_term.reshape(flat, length, 1)
        grad_out = grad_out.reshape(flat, length, -1)
    if grad_logsumexp is not None:
        grad_logsumexp = grad_logsumexp.reshape(flat, length, 1).to(blocks.dtype)
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
        grad_mask = blocks.unflatten(grad_mask).sum_to_size(mask.shape).to(mask.dtype)
    # Summed in float32 (half inputs), returned in the inputs' dtype.
    grad_q, grad_k, grad_v = (
        None if grad is None else blocks.unflatten(grad).to(q.dtype)
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
