"""Sinh (intermediates returned as outputs) and SinhBad (intermediates stashed on ctx)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward import Sinh, SinhBad, sinh
from double_backward.graph_walks import reaches

from ..helpers import derivatives


def x64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_sinh_returns_the_halved_exponentials_as_extra_outputs():
    x = x64(-2.0, 0.5, 3.0)
    value, half_exp_x, half_exp_neg_x = Sinh.apply(x)
    torch.testing.assert_close(half_exp_x, torch.exp(x) / 2)
    torch.testing.assert_close(half_exp_neg_x, torch.exp(-x) / 2)
    # The extra outputs are tracked: they have Sinh's backward as grad_fn.
    assert half_exp_x.grad_fn is value.grad_fn is half_exp_neg_x.grad_fn


def test_sinh_is_finite_where_the_true_sinh_is_finite_although_exp_overflows():
    # exp(710) overflows float64 but sinh(710) = 1.117e308 does not.
    x = torch.tensor([710.0, -710.0, 710.4], dtype=torch.float64)
    expected = torch.tensor([math.sinh(v) for v in x.tolist()], dtype=torch.float64)
    assert torch.isinf(torch.exp(x[:1])).all()
    torch.testing.assert_close(sinh(x), expected, rtol=1e-13, atol=0)
    first = derivatives(sinh, x, 1)[1]
    torch.testing.assert_close(first, expected.abs(), rtol=1e-6, atol=0)


def test_sinh_first_derivative_is_not_nan_where_exp_overflows():
    # Regression: zeros materialised for the unused outputs gave 0 * inf = nan here.
    assert derivatives(sinh, x64(720.0, -720.0), 1)[1].tolist() == [math.inf, math.inf]


def test_sinh_bad_first_order_is_correct():
    x = x64(-1.0, 0.25, 2.0)
    assert gradcheck(SinhBad.apply, (x,))
    torch.testing.assert_close(
        derivatives(SinhBad.apply, x, 1)[1], torch.cosh(x.detach())
    )


def test_sinh_bad_grad_x_has_no_graph_back_to_x():
    x = x64(-1.0, 0.25, 2.0)
    (grad_x,) = torch.autograd.grad(SinhBad.apply(x).sum(), x, create_graph=True)
    assert grad_x.grad_fn is None
    assert not grad_x.requires_grad
    with pytest.raises(
        RuntimeError, match="element 0 of tensors does not require grad"
    ):
        torch.autograd.grad(grad_x.sum(), x)


def test_sinh_bad_fails_gradgradcheck_with_a_jacobian_mismatch_against_x():
    x = x64(-1.0, 0.25, 2.0)
    with pytest.raises(
        GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"
    ):
        gradgradcheck(SinhBad.apply, (x,))


def test_sinh_bad_second_derivative_is_silently_zero_when_grad_out_requires_grad():
    # gradgradcheck's setting: grad_out requires grad, so grad_x has a graph, but only to grad_out.
    x = x64(-1.0, 0.25, 2.0)
    grad_out = torch.ones_like(x, requires_grad=True)
    (grad_x,) = torch.autograd.grad(SinhBad.apply(x), x, grad_out, create_graph=True)
    assert grad_x.grad_fn is not None
    assert reaches(grad_x, grad_out)
    assert not reaches(grad_x, x)
    (second,) = torch.autograd.grad(
        grad_x.sum(), x, allow_unused=True, materialize_grads=True
    )
    assert torch.equal(second, torch.zeros_like(x))
    assert not torch.allclose(second, torch.sinh(x.detach()))


def test_sinh_second_order_graph_reaches_x_where_sinh_bad_does_not():
    x = x64(0.5)
    (good,) = torch.autograd.grad(sinh(x).sum(), x, create_graph=True)
    (bad,) = torch.autograd.grad(SinhBad.apply(x).sum(), x, create_graph=True)
    assert reaches(good, x)
    assert bad.grad_fn is None
