"""Outputs (or inputs) of the same shape get directions of their own.

The pattern: a Function returning two tensors shaped like its input (a fused ``sincos``, the
real and imaginary parts of a transform, a value and its running square), or taking two inputs
of one shape (``x * y``-style binary ops). A backward that pairs each incoming gradient with
the other output's derivative (or returns the two inputs' gradients in the wrong order) gives
the same products when both outputs (inputs) are probed with one shared random direction, so
above gradcheck's size, where the random directions are the only evidence, it would pass.
gradcheck at a small size is the independent reference: it fails the swapped versions and
passes the correct twins.
"""

import pytest
import torch

from double_backward import check

LARGE = 100_000  # above gradcheck's size: the directional checks alone decide


class SinCos(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.sin(), x.cos()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        (x,) = ctx.saved_tensors
        return grad_sin * x.cos() - grad_cos * x.sin()


class SinCosSwapped(SinCos):
    @staticmethod
    def backward(ctx, grad_sin, grad_cos):  # each gradient meets the other output's derivative
        (x,) = ctx.saved_tensors
        return grad_cos * x.cos() - grad_sin * x.sin()


class MulSquare(torch.autograd.Function):
    """x * y**2"""

    @staticmethod
    def forward(x, y):
        return x * y**2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y**2, 2 * grad * x * y


class MulSquareSwapped(MulSquare):
    @staticmethod
    def backward(ctx, grad):  # the two inputs' gradients returned in the wrong order
        x, y = ctx.saved_tensors
        return 2 * grad * x * y, grad * y**2


CASES = {
    "two outputs of one shape": (SinCos, SinCosSwapped, 1),
    "two inputs of one shape": (MulSquare, MulSquareSwapped, 2),
}


def _inputs(count: int, n: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(n, dtype=torch.float64, generator=generator) + 2 for _ in range(count)]


@pytest.mark.parametrize("case", CASES)
def test_gradcheck_tells_them_apart(case):
    correct, swapped, count = CASES[case]
    small = [x.requires_grad_() for x in _inputs(count, 6)]
    assert torch.autograd.gradcheck(correct.apply, small)
    assert not torch.autograd.gradcheck(swapped.apply, small, raise_exception=False)


@pytest.mark.parametrize("case", CASES)
def test_check_tells_them_apart_above_gradchecks_size(case):
    correct, swapped, count = CASES[case]
    inputs = _inputs(count, LARGE)
    assert check(correct.apply, *inputs).ok
    report = check(swapped.apply, *inputs)
    assert "first-order" in report.problem_names(), report
