"""Autocast: a custom Function's backward runs outside the autocast region unless told.

Under :class:`torch.autocast`, ops on autocast's list (matmul among them) run in the low
precision dtype. ``forward`` runs inside the region, but ``backward`` runs later, wherever
``backward()`` or ``torch.autograd.grad`` is called, usually outside it.
:func:`torch.amp.custom_bwd` runs backward under the autocast state forward ran with;
:func:`torch.amp.custom_fwd` records that state (and, with ``cast_inputs=``, runs forward in
one dtype with autocast off). ``MatmulAutocast`` uses both; ``MatmulNoCustomBwd`` is
**broken on purpose**: it leaves backward to run without autocast.

Both decorators take the ``device_type`` whose autocast they follow: ``"cpu"`` here, as the
site is built on CPUs; a CUDA model decorates with ``device_type="cuda"``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.amp import custom_bwd, custom_fwd

from ._validation import check_real_tensor


class MatmulAutocast(torch.autograd.Function):
    """y = a @ b, saving the inputs a and b; autocast-aware through custom_fwd and custom_bwd.

    Backward returns grad_a = grad_out @ bᵀ and grad_b = aᵀ @ grad_out, made of recorded
    matmuls on saved inputs, so double backward works (the second derivative is made of the
    mixed terms). Under autocast, forward returns the low-precision product; custom_bwd runs
    backward under the same autocast state, so its matmuls cast their operands alike instead
    of meeting a low-precision grad_out and full-precision saved inputs.
    """

    @staticmethod
    @custom_fwd(device_type="cpu")
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        check_real_tensor("MatmulAutocast", "a", a)
        check_real_tensor("MatmulAutocast", "b", b)
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad_out @ b.mT, a.mT @ grad_out


class MatmulNoCustomBwd(torch.autograd.Function):
    """BROKEN ON PURPOSE: ``MatmulAutocast`` without the decorators.

    Under autocast, forward returns a low-precision product, so grad_out arrives in that
    dtype; backward runs outside autocast and multiplies it with the full-precision saved
    inputs: matmul refuses the mix of dtypes. Fix: decorate with custom_fwd and custom_bwd.
    """

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        check_real_tensor("MatmulNoCustomBwd", "a", a)
        check_real_tensor("MatmulNoCustomBwd", "b", b)
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad_out @ b.mT, a.mT @ grad_out
