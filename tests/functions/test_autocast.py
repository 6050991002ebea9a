"""MatmulAutocast against native matmul (float64, to third order, and under CPU autocast);
the undecorated version fails under autocast.

Expected values: native ``torch.matmul`` (differentiated by autograd, in float64 or under the
same autocast), gradcheck, and bfloat16's precision, never the Function under test.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward.functions.autocast import MatmulAutocast, MatmulNoCustomBwd


def operands(dtype=torch.float64):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, dtype=dtype, generator=generator).requires_grad_()
    b = torch.randn(4, 2, dtype=dtype, generator=generator).requires_grad_()
    return a, b


def test_matmul_passes_gradcheck_and_gradgradcheck():
    assert gradcheck(MatmulAutocast.apply, operands())
    assert gradgradcheck(MatmulAutocast.apply, operands())


def derivatives_of_penalty(matmul, a, b, order=3):
    """The loss sum((a@b)²), then the gradient of each order's squared norm, as a penalty."""
    loss = matmul(a, b).float().pow(2).sum()
    results = []
    for _ in range(order):
        grads = torch.autograd.grad(
            loss, (a, b), create_graph=True, allow_unused=True, materialize_grads=True
        )
        results.append(grads)
        loss = sum(grad.pow(2).sum() for grad in grads)
    return results


def test_matmul_matches_native_to_third_order():
    ours = derivatives_of_penalty(MatmulAutocast.apply, *operands())
    native = derivatives_of_penalty(torch.matmul, *operands())
    for mine, theirs in zip(ours, native, strict=True):
        for m, t in zip(mine, theirs, strict=True):
            torch.testing.assert_close(m, t)


def autocast_penalty_grads(matmul):
    a, b = operands(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        product = matmul(a, b)
        loss = product.float().pow(2).sum()
    grads = torch.autograd.grad(loss, (a, b), create_graph=True)
    second = torch.autograd.grad(sum(g.pow(2).sum() for g in grads), (a, b))
    return product, second


def test_under_autocast_it_computes_in_bfloat16_like_native_and_double_backward_is_right():
    product, second = autocast_penalty_grads(MatmulAutocast.apply)
    native_product, _ = autocast_penalty_grads(torch.matmul)
    assert product.dtype == native_product.dtype == torch.bfloat16
    reference = derivatives_of_penalty(torch.matmul, *operands(), order=2)[1]
    for ours, expected in zip(second, reference, strict=True):
        assert ours.dtype == torch.float32
        # bfloat16 keeps 8 significant bits: a relative error of a few 2^-8.
        relative = (ours.double() - expected).norm() / expected.norm()
        assert relative < 4 * torch.finfo(torch.bfloat16).eps


def test_without_custom_bwd_backward_under_autocast_mixes_dtypes():
    with pytest.raises(RuntimeError, match="same dtype"):
        autocast_penalty_grads(MatmulNoCustomBwd.apply)


def test_without_autocast_the_undecorated_version_is_right():
    assert gradgradcheck(MatmulNoCustomBwd.apply, operands())


@pytest.mark.parametrize("function", [MatmulAutocast, MatmulNoCustomBwd])
def test_non_tensor_input_is_refused_with_the_function_named(function):
    with pytest.raises(TypeError, match=function.__name__):
        function.apply([1.0], torch.ones(1, 1))
