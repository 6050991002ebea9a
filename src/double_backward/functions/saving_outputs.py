"""Case 2 of the tutorial: the tensor backward needs is an *output* of forward."""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


class Exp(torch.autograd.Function):
    """y = eˣ, saving the output y for backward, which returns grad_x = grad_out · y.

    An output is tracked too: its grad_fn is this Function's backward, so
    grad_x = grad_out * y has a graph back to x through it. Double backward works as
    for a saved input.
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
