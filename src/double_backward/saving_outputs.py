"""Case 2 of the tutorial: the tensor backward needs is an *output* of forward."""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


class Exp(torch.autograd.Function):
    r"""Compute :math:`y = e^x`, saving the output :math:`y` for backward.

    Since :math:`\frac{d}{dx} e^x = e^x`, backward returns :math:`\bar{x} = y\,\bar{y}` and needs
    no other tensor. An output saved with ``save_for_backward`` is unpacked in backward with
    this Function as its ``grad_fn``, so ``grad_x = y * grad_out`` depends on ``x`` through
    ``y`` and double backward works, exactly as when saving an input.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Exp", "x", x)
        result = torch.exp(x)
        # An output: autograd attaches this Function as its grad_fn, so it stays tracked.
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (result,) = ctx.saved_tensors
        return grad_out * result
