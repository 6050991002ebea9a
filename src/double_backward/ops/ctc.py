r"""``F.ctc_loss`` as a log-space recursion of differentiable ops: every order works."""

from __future__ import annotations

import math
from typing import Any

import torch

from ._checks import _check_tensor

__all__ = ["ctc_loss"]

#: Log-probability of an unreachable state: finite, so that no −inf − (−inf) = nan reaches a
#: gradient, and far below any reachable path (whose log-probability is a sum of T terms).
_UNREACHABLE = -1e30


def _as_lengths(op: str, name: str, value: Any, batch: int) -> torch.Tensor:
    # Lengths are host data (torch's op takes them as integer lists): on the CPU, whatever
    # the default device, then moved to log_probs' device for the recursion.
    lengths = torch.as_tensor(value, dtype=torch.long, device="cpu").reshape(-1)
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
