"""Complex inputs: the conjugate PyTorch's convention puts in every backward.

For a holomorphic f, PyTorch's backward of y = f(z) returns grad_z = grad_out · conj(f'(z)):
the gradient a real-valued loss L has with respect to z is ∂L/∂z̄ (conjugate Wirtinger
derivative), which is what gradient descent steps along. ``ComplexSquare`` follows it;
``ComplexSquareNoConj`` is **broken on purpose**: the real-valued formula 2 · z · grad_out.
"""

from __future__ import annotations

from typing import Any

import torch


def _check_tensor(function_name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or not (
        value.is_complex() or value.is_floating_point()
    ):
        got = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
        raise TypeError(
            f"{function_name}: argument 'z' must be a complex or floating-point "
            f"torch.Tensor, got {got}"
        )
    return value


class ComplexSquare(torch.autograd.Function):
    """y = z², for complex (or real) z, saving the input z.

    Backward returns grad_z = grad_out · conj(2z) = 2 · grad_out · z̄: PyTorch's convention
    for a holomorphic function. ``conj`` is a recorded, differentiable operation and z is an
    input, so grad_z has a graph back to z and double backward works, to every order. On a
    real z, ``conj`` does nothing and this is ``Square``.
    """

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor) -> torch.Tensor:
        _check_tensor("ComplexSquare", z)
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (z,) = ctx.saved_tensors
        return 2 * grad_out * z.conj()


class ComplexSquareNoConj(torch.autograd.Function):
    """BROKEN ON PURPOSE: y = z² with the real-valued backward 2 · grad_out · z, no conjugate.

    Right for real z, wrong for complex z: it returns 2 · grad_out · z where PyTorch expects
    2 · grad_out · z̄, so gradcheck fails. gradgradcheck passes: it checks the derivative of
    this backward against this backward, whatever the backward computes. Fix: conjugate
    f'(z), as ``ComplexSquare`` does.
    """

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor) -> torch.Tensor:
        _check_tensor("ComplexSquareNoConj", z)
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (z,) = ctx.saved_tensors
        return 2 * grad_out * z
