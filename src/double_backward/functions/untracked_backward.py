r"""Case 4 of the tutorial: a backward that autograd cannot record.

Here the first backward of :math:`y = x^3`, :math:`\bar{x} = 3x^2\,\bar{y}`, is computed with
NumPy on detached arrays, standing in for SciPy, a C++ extension or any code outside PyTorch.
Autograd sees none of it. The fix is to make that computation a custom Function of its own,
:class:`CubeBackward`, whose backward (written with differentiable torch ops) supplies the
second derivative.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._validation import check_real_tensor

# NumPy has no bfloat16 or float8: those are computed in float32 and cast back.
_NUMPY_FLOAT_DTYPES = (torch.float16, torch.float32, torch.float64)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """Detach ``tensor`` from autograd and copy it into a NumPy array on the CPU."""
    tensor = tensor.detach().cpu()
    if tensor.is_floating_point() and tensor.dtype not in _NUMPY_FLOAT_DTYPES:
        tensor = tensor.float()
    return tensor.resolve_neg().numpy()


def cube_backward_numpy(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad_out · 3x², computed by NumPy outside autograd.

    The result has x's device and the dtype torch.result_type(grad_out, x), as in torch.
    """
    # Overflow gives inf, as in torch, without NumPy's RuntimeWarning.
    with np.errstate(over="ignore", invalid="ignore"):
        result = 3 * _to_numpy(x) ** 2 * _to_numpy(grad_out)
    dtype = torch.result_type(grad_out, x)
    return torch.from_numpy(np.asarray(result)).to(device=x.device, dtype=dtype)


class Cube(torch.autograd.Function):
    """y = x³, saving the input x; backward is computed by NumPy, through CubeBackward.

    Autograd cannot record NumPy, but it records the call to CubeBackward.apply, so
    under create_graph=True grad_x has CubeBackward's backward as grad_fn: double
    backward works.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Cube", "x", x)
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # Calling a Function (not NumPy directly) is what autograd can record.
        return CubeBackward.apply(grad_out, x)


class CubeBackward(torch.autograd.Function):
    """g = grad_out · 3x² computed by NumPy; its derivatives are written by hand.

    Saves both inputs. Backward returns ∂g/∂grad_out · ḡ = 3x² · ḡ and
    ∂g/∂x · ḡ = 6x · grad_out · ḡ, torch ops on saved inputs: so third and
    higher derivatives of Cube work too. Each is computed only for an input that requires
    grad (``ctx.needs_input_grad``): in a plain double backward grad_out does not, and
    skipping its term saves three of backward's six kernels.
    """

    @staticmethod
    def forward(ctx: Any, grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("CubeBackward", "grad_out", grad_out)
        check_real_tensor("CubeBackward", "x", x)
        ctx.save_for_backward(grad_out, x)
        return cube_backward_numpy(grad_out, x)

    @staticmethod
    def backward(
        ctx: Any, grad_grad_x: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        grad_out, x = ctx.saved_tensors
        needs_grad_out, needs_x = ctx.needs_input_grad
        # None for an input that does not require grad: autograd would discard it anyway.
        grad_grad_out = grad_grad_x * 3 * x**2 if needs_grad_out else None
        grad2_x = grad_grad_x * grad_out * 6 * x if needs_x else None
        return grad_grad_out, grad2_x
