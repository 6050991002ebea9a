"""The failure gallery's Functions fail exactly as the page says, after a correct first order."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions import failures, setup_context_style

BROKEN_SECOND_ORDER = [
    pytest.param(failures.SinhSavesIntermediate.apply, id="saves-intermediate"),
    pytest.param(
        failures.SinhNonDifferentiableExtras.apply, id="non-differentiable-extras"
    ),
    pytest.param(failures.sinh_drops_extra_grads, id="drops-extra-grads"),
    pytest.param(failures.SquareDetachesInBackward.apply, id="detaches"),
]


@pytest.fixture
def x():
    return torch.tensor([0.5, -1.25, 2.0], dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("fn", BROKEN_SECOND_ORDER)
def test_first_order_passes_and_second_order_fails(fn, x):
    assert gradcheck(fn, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(fn, (x,))


@pytest.mark.parametrize(
    "fn",
    [failures.SinhSavesIntermediate.apply, failures.SinhNonDifferentiableExtras.apply,
     failures.SquareDetachesInBackward.apply],
)  # fmt: skip
def test_loud_failures_raise_on_double_backward(fn, x):
    output = fn(x)
    output = output[0] if isinstance(output, tuple) else output  # Sinh-like: the value
    (grad_x,) = torch.autograd.grad(output.sum(), x, create_graph=True)
    with pytest.raises(
        RuntimeError, match="element 0 of tensors does not require grad"
    ):
        torch.autograd.grad(grad_x.sum(), x)


def test_dropped_extra_grads_give_a_silent_zero_second_derivative(x):
    (grad_x,) = torch.autograd.grad(
        failures.sinh_drops_extra_grads(x).sum(), x, create_graph=True
    )
    (second,) = torch.autograd.grad(grad_x.sum(), x)  # no error...
    assert torch.equal(second, torch.zeros_like(x))  # ...but zero instead of sinh(x)


def test_once_differentiable_raises_its_own_error_when_grad_out_requires_grad(x):
    grad_out = torch.ones_like(x, requires_grad=True)
    y = failures.SquareOnceDifferentiable.apply(x)
    (grad_x,) = torch.autograd.grad(y, x, grad_out, create_graph=True)
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        grad_x.sum().backward()


def test_numpy_forward_with_generated_vmap_rule_fails_under_vmap():
    batch = torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="doesn't have storage"):
        torch.func.vmap(failures.CubeBackwardNumpyUnderVmap.apply)(batch, batch)
    # The hand-written vmap rule of the fixed version handles the same call.
    result = torch.func.vmap(setup_context_style.CubeBackward.apply)(batch, batch)
    torch.testing.assert_close(result, 3 * batch)


def test_a_function_without_jvp_works_in_reverse_mode_but_not_in_forward_mode():
    x = torch.tensor([0.5, -1.25], dtype=torch.float64)
    square = failures.SquareWithoutJvp.apply
    torch.testing.assert_close(torch.func.jacrev(square)(x), torch.diag(2 * x))
    with pytest.raises(NotImplementedError, match="must implement the jvp function"):
        torch.func.hessian(lambda t: square(t).sum())(x)
