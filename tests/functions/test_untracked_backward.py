"""Cube: a NumPy backward autograd cannot record, made differentiable by CubeBackward."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward import Cube, CubeBackward
from double_backward.functions.untracked_backward import cube_backward_numpy


def test_numpy_backward_is_invisible_to_autograd():
    x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    grad_out = torch.ones_like(x, requires_grad=True)
    # Grad mode is on and both inputs require grad, yet the result has no history.
    result = cube_backward_numpy(grad_out, x)
    assert result.grad_fn is None
    assert not result.requires_grad
    torch.testing.assert_close(result, 3 * x.detach() ** 2)


def test_cube_grad_x_comes_from_cube_backward():
    x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert type(grad_x.grad_fn).__name__ == "CubeBackwardBackward"


def test_cube_backward_passes_checks_in_both_of_its_inputs():
    torch.manual_seed(0)
    grad_out = torch.randn(3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(CubeBackward.apply, (grad_out, x))
    assert gradgradcheck(CubeBackward.apply, (grad_out, x))


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64]
)
def test_cube_first_derivative_keeps_dtype_and_device(dtype):
    x = torch.tensor([0.5, -1.5, 2.0], dtype=dtype, requires_grad=True)
    (grad_x,) = torch.autograd.grad(Cube.apply(x).sum(), x)
    (native,) = torch.autograd.grad((x**3).sum(), x)
    assert grad_x.dtype == dtype
    assert grad_x.device == x.device
    torch.testing.assert_close(grad_x, native)


def test_cube_backward_result_dtype_follows_type_promotion():
    grad_out = torch.ones(2, dtype=torch.float32)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert cube_backward_numpy(grad_out, x).dtype == torch.result_type(grad_out, x)


def test_cube_backward_accepts_a_negated_view():
    # torch.Tensor.numpy() refuses tensors with the negative bit set; the helper resolves it.
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)._neg_view()
    torch.testing.assert_close(
        cube_backward_numpy(torch.ones(2, dtype=torch.float64), x),
        torch.tensor([3.0, 12.0], dtype=torch.float64),
    )


def test_cube_backward_skips_the_gradient_of_an_input_that_does_not_require_grad():
    # 3x² · ḡ (for grad_out) needs a pow; 6x · grad_out · ḡ (for x) only muls. With grad_out
    # not requiring grad, the backward of CubeBackward runs no pow; with it, one.
    from double_backward.costs import aten_ops

    x = torch.tensor([1.5, -2.0], dtype=torch.float64, requires_grad=True)
    ops = {}
    for needs in (False, True):
        grad_out = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=needs)
        g = CubeBackward.apply(grad_out, x)
        inputs = (grad_out, x) if needs else (x,)
        ops[needs] = aten_ops(
            lambda g=g, inputs=inputs: torch.autograd.grad(g.sum(), inputs)
        )
        grads = torch.autograd.grad(CubeBackward.apply(grad_out, x).sum(), inputs)
        torch.testing.assert_close(grads[-1], 6 * x.detach() * grad_out.detach())
    assert "pow" not in ops[False]
    assert ops[True].count("pow") == 1
