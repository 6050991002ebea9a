"""The setup_context-style Functions under torch.func, against the native ops."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vmap

from double_backward.functions import setup_context_style as modern

PAIRS = [
    pytest.param(modern.Square.apply, lambda x: x**2, id="Square"),
    pytest.param(modern.Exp.apply, torch.exp, id="Exp"),
    pytest.param(modern.Cube.apply, lambda x: x**3, id="Cube"),
]


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(4, dtype=torch.float64)


@pytest.mark.parametrize(("ours", "native"), PAIRS)
def test_autograd_checks_pass(ours, native, x):
    inputs = (x.clone().requires_grad_(),)
    assert gradcheck(ours, inputs)
    assert gradgradcheck(ours, inputs)


@pytest.mark.parametrize(("ours", "native"), PAIRS)
def test_torch_func_transforms_match_native(ours, native, x):
    def summed(f):
        return lambda t: f(t).sum()

    torch.testing.assert_close(vmap(ours)(x), native(x))
    elementwise_second = vmap(grad(grad(ours)))(x)
    torch.testing.assert_close(elementwise_second, vmap(grad(grad(native)))(x))
    torch.testing.assert_close(
        jacrev(jacrev(summed(ours)))(x), jacrev(jacrev(summed(native)))(x)
    )
    torch.testing.assert_close(hessian(summed(ours))(x), hessian(summed(native))(x))
    torch.testing.assert_close(jacfwd(ours)(x), jacrev(native)(x))


@pytest.mark.parametrize(("ours", "native"), PAIRS)
def test_forward_over_reverse_equals_reverse_over_reverse(ours, native, x):
    v = torch.randn_like(x)

    def f(t):
        return ours(t).sum()

    forward_over_reverse = jvp(grad(f), (x,), (v,))[1]
    _, reverse_over_reverse = torch.autograd.functional.hvp(f, x, v)
    torch.testing.assert_close(forward_over_reverse, reverse_over_reverse)


def test_cube_backward_vmap_rule_handles_one_unbatched_input(x):
    batch = torch.stack([x, 2 * x])
    result = vmap(modern.CubeBackward.apply, in_dims=(None, 0))(
        torch.ones_like(x), batch
    )
    torch.testing.assert_close(result, 3 * batch**2)
    result = vmap(modern.CubeBackward.apply, in_dims=(1, None))(batch.T, x)
    torch.testing.assert_close(result, batch * 3 * x**2)


def test_modern_functions_reject_non_tensors():
    with pytest.raises(TypeError, match="Square: argument 'x' must be a torch.Tensor"):
        modern.Square.apply([1.0])
