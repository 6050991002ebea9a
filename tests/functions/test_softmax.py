"""Softmax three ways, each against torch.softmax to the third derivative.

Models the softmax a fused-attention or a custom classifier head reimplements (with a hand
written backward kernel, or a ``jvp`` for forward mode), checked as PyTorch's own
``autograd_function_db`` checks its NumForward-style Functions: gradcheck and gradgradcheck in
float64, and agreement with the native op.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.func import grad, hessian, jacfwd, jacrev, vmap

from double_backward.functions import softmax as sm

from .directional import assert_matches_native

VERSIONS = [
    pytest.param(sm.softmax, id="differentiable-ops"),
    pytest.param(sm.softmax_hand_written, id="SoftmaxBackward"),
    pytest.param(sm.softmax_with_jvp, id="jvp-reused"),
]

# (shape, dim): the last dim, a middle one, the first, a negative index, a single row.
SHAPES_AND_DIMS = [
    ((3, 5), -1),
    ((2, 3, 4), 1),
    ((4, 3), 0),
    ((2, 3, 4), -3),
    ((6,), 0),
]


@pytest.mark.parametrize("ours", VERSIONS)
@pytest.mark.parametrize(("shape", "dim"), SHAPES_AND_DIMS)
def test_value_and_three_derivatives_match_native_in_float64(ours, shape, dim):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64)
    assert_matches_native(
        lambda t: ours(t, dim), lambda t: torch.softmax(t, dim), [x],
        rtol=1e-10, atol=1e-12,
    )  # fmt: skip


@pytest.mark.parametrize("ours", VERSIONS)
def test_value_and_three_derivatives_match_native_in_float32(ours):
    torch.manual_seed(0)
    x = torch.randn(4, 7) * 3
    assert_matches_native(
        lambda t: ours(t, -1), lambda t: torch.softmax(t, -1), [x], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("ours", VERSIONS)
@pytest.mark.parametrize(("shape", "dim"), SHAPES_AND_DIMS[:3])
def test_gradcheck_and_gradgradcheck_pass(ours, shape, dim):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: ours(t, dim), (x,))
    assert gradgradcheck(lambda t: ours(t, dim), (x,))


@pytest.mark.parametrize(
    "backward_function", [sm.SoftmaxBackward, sm.SoftmaxWithJvpBackward]
)
def test_the_backward_functions_pass_checks_in_both_tensor_inputs(backward_function):
    torch.manual_seed(0)
    grad_out = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.softmax(torch.randn(3, 4, dtype=torch.float64), -1).requires_grad_()

    def g(grad_out, y):
        return backward_function.apply(grad_out, y, -1)

    assert gradcheck(g, (grad_out, y))
    assert gradgradcheck(g, (grad_out, y))


@pytest.mark.parametrize("ours", VERSIONS)
def test_hessian_matches_native_when_grad_out_depends_on_x(ours):
    # A composed loss: the gradient arriving at softmax is itself a function of x.
    torch.manual_seed(0)
    x0 = torch.randn(3, 5, dtype=torch.float64)
    target = torch.randn(3, 5, dtype=torch.float64)

    def loss(f):
        def of(x):
            return ((f(x, -1) - target) ** 2 * x.sin()).sum()

        return of

    expected = torch.autograd.functional.hessian(loss(torch.softmax), x0)
    torch.testing.assert_close(
        torch.autograd.functional.hessian(loss(ours), x0), expected
    )


def test_jvp_version_works_in_forward_mode_and_under_torch_func():
    torch.manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.float64)
    c = torch.randn(3, 4, dtype=torch.float64)

    def ours(t):
        return (sm.softmax_with_jvp(t, -1) * c).sum()

    def native(t):
        return (torch.softmax(t, -1) * c).sum()

    # forward over reverse runs both jvp staticmethods; vmap uses the generated rules.
    torch.testing.assert_close(jacfwd(jacrev(ours))(x), hessian(native)(x))
    torch.testing.assert_close(vmap(grad(ours))(x), vmap(grad(native))(x))


def test_double_backward_of_the_jvp_version_calls_softmax_jvp(monkeypatch):
    calls = []
    original = sm.softmax_jvp
    monkeypatch.setattr(sm, "softmax_jvp", lambda *a: calls.append(a) or original(*a))
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(
        sm.softmax_with_jvp(x, -1), x, grad_out, create_graph=True
    )
    torch.autograd.grad(grad_x.sum(), grad_out)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "backward_function", [sm.SoftmaxBackward, sm.SoftmaxWithJvpBackward]
)
def test_backward_skips_the_term_of_an_input_that_needs_no_grad(backward_function):
    # In a plain double backward grad_out does not require grad: its term is not computed.
    from double_backward.costs import aten_ops

    y = torch.softmax(torch.randn(2, 3, dtype=torch.float64), -1).requires_grad_()
    counts = {}
    for needs in (False, True):
        grad_out = torch.randn(2, 3, dtype=torch.float64, requires_grad=needs)
        g = backward_function.apply(grad_out, y, -1)
        inputs = (grad_out, y) if needs else (y,)
        counts[needs] = len(
            aten_ops(lambda g=g, i=inputs: torch.autograd.grad(g.sum(), i))
        )
    assert counts[False] < counts[True]


@pytest.mark.parametrize("ours", VERSIONS)
def test_bad_input_is_refused_with_a_clear_message(ours):
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        ours([1.0, 2.0], 0)
    with pytest.raises(TypeError, match="floating-point"):
        ours(torch.tensor([1, 2]), 0)
    with pytest.raises(TypeError, match="'dim' must be an int"):
        ours(torch.randn(3), 0.0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        ours(torch.randn(3), 1)
