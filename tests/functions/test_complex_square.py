"""ComplexSquare against native z * z to third order; the version without conj fails gradcheck.

Expected values: native torch's complex autograd (``z * z``) and gradcheck's finite
differences, never the Function under test.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.complex_square import ComplexSquare, ComplexSquareNoConj


@pytest.fixture
def z():
    return torch.tensor(
        [1 + 2j, -0.5 + 1j, 3 - 1j], dtype=torch.complex128, requires_grad=True
    )


def test_complex_square_passes_gradcheck_and_gradgradcheck(z):
    assert gradcheck(ComplexSquare.apply, (z,))
    assert gradgradcheck(ComplexSquare.apply, (z,))


def vector_derivatives(fn, z, order):
    """fn(z), then each order's vector-Jacobian product along fixed complex vectors."""
    generator = torch.Generator().manual_seed(0)
    values = [fn(z)]
    for _ in range(order):
        v = torch.randn(z.shape, dtype=z.dtype, generator=generator)
        if not values[-1].requires_grad:  # a constant: every later derivative is zero
            values.append(torch.zeros_like(z))
            continue
        (grad,) = torch.autograd.grad(
            values[-1],
            z,
            v,
            create_graph=True,
            allow_unused=True,
            materialize_grads=True,
        )
        values.append(grad)
    return values


def test_complex_square_matches_native_to_third_order(z):
    ours = vector_derivatives(ComplexSquare.apply, z, 3)
    native = vector_derivatives(lambda t: t * t, z, 3)
    for mine, theirs in zip(ours, native, strict=True):
        torch.testing.assert_close(mine, theirs)


def test_complex_square_on_real_input_is_square():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(ComplexSquare.apply(x).sum(), x)
    torch.testing.assert_close(grad_x, 2 * x.detach())


def test_without_conj_gradcheck_fails_and_gradgradcheck_cannot_tell(z):
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradcheck(ComplexSquareNoConj.apply, (z,))
    # gradgradcheck differentiates the backward as written: consistent, however wrong.
    assert gradgradcheck(ComplexSquareNoConj.apply, (z,))


def test_without_conj_the_gradient_of_a_real_loss_is_wrong(z):
    def grad_of_loss(fn):
        return torch.autograd.grad((fn(z) - 1).abs().pow(2).sum(), z)[0]

    assert not torch.allclose(
        grad_of_loss(ComplexSquareNoConj.apply), grad_of_loss(lambda t: t * t)
    )


@pytest.mark.parametrize("function", [ComplexSquare, ComplexSquareNoConj])
def test_integer_input_is_refused_with_the_function_named(function):
    with pytest.raises(TypeError, match=f"{function.__name__}.*complex or floating"):
        function.apply(torch.arange(3))
