"""The failure gallery's Functions fail exactly as the page says, after a correct first order."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward import SinhBad
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


# -- how readers meet the failures: second_derivative --------------------------------------
# Expected values come from native autograd (the Hessian of the same loss written with torch
# ops) and from the derivative by hand, never from second_derivative itself.
def native_hessian_diagonal(loss, x):
    return torch.autograd.functional.hessian(loss, x.detach()).diagonal()


def test_second_derivative_of_a_native_op_matches_the_hessian_of_each_loss(x):
    ones = native_hessian_diagonal(lambda t: torch.sinh(t).sum(), x)
    composed = native_hessian_diagonal(lambda t: (torch.sinh(t) ** 2).sum() / 2, x)
    torch.testing.assert_close(failures.second_derivative(torch.sinh, x, "ones"), ones)
    torch.testing.assert_close(
        failures.second_derivative(torch.sinh, x, "ones requiring grad"), ones
    )
    torch.testing.assert_close(
        failures.second_derivative(torch.sinh, x, "depends on x"), composed
    )
    # By hand: d²/dx² of ½ sinh² x = cosh 2x.
    torch.testing.assert_close(composed, torch.cosh(2 * x.detach()))


def test_second_derivative_after_relu_matches_the_hessian_of_the_relu_loss(x):
    after_relu = native_hessian_diagonal(lambda t: torch.relu(torch.sinh(t)).sum(), x)
    torch.testing.assert_close(
        failures.second_derivative(torch.sinh, x, "after relu"), after_relu
    )
    # By hand: d²/dx² of relu(sinh x) is [sinh x > 0] sinh x, away from 0.
    x = x.detach()
    torch.testing.assert_close(after_relu, torch.where(x > 0, torch.sinh(x), 0.0))


BROKEN_SINH_AFTER_RELU = [
    pytest.param(SinhBad.apply, id="sinh-bad"),
    *BROKEN_SECOND_ORDER[:3],
]


@pytest.mark.parametrize("fn", BROKEN_SINH_AFTER_RELU)
def test_a_broken_sinh_after_relu_gives_an_exact_silent_zero(fn, x):
    # relu's incoming gradient is a 0/1 step whose derivative is zero: grad_x's only path
    # to x goes through it, so plain autograd returns exactly 0 and raises nothing.
    leaf = x.detach().requires_grad_()
    output = fn(leaf)
    output = output[0] if isinstance(output, tuple) else output
    (grad_x,) = torch.autograd.grad(torch.relu(output).sum(), leaf, create_graph=True)
    (by_autograd,) = torch.autograd.grad(grad_x.sum(), leaf)
    assert (by_autograd == 0).all()
    second = failures.second_derivative(fn, x, "after relu", no_path_as_zero=False)
    assert second is not None and (second == 0).all()
    native = native_hessian_diagonal(lambda t: torch.relu(torch.sinh(t)).sum(), x)
    assert native.abs().max() > 1  # sinh 2 = 3.63 where x = 2


def test_a_broken_sinh_in_a_relu_network_gives_an_exact_silent_zero(x):
    # SinhBad -> Linear -> ReLU -> Linear, against the same network after torch.sinh.
    torch.manual_seed(0)
    network = torch.nn.Sequential(
        torch.nn.Linear(1, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)
    ).double()

    def second(sinh_fn):
        leaf = x.detach().requires_grad_()
        loss = network(sinh_fn(leaf).unsqueeze(-1)).sum()
        (grad_x,) = torch.autograd.grad(loss, leaf, create_graph=True)
        return torch.autograd.grad(grad_x.sum(), leaf)[0]

    assert (second(SinhBad.apply) == 0).all()
    assert second(torch.sinh).abs().max() > 0.01


def test_second_derivative_refuses_an_unknown_incoming_gradient(x):
    with pytest.raises(ValueError, match="grad_out must be one of"):
        failures.second_derivative(torch.sinh, x, "zeros")


def by_hand_with_ones_requiring_grad(fn, x):
    """grad_x of fn with an incoming gradient of ones that requires grad, by plain autograd."""
    x = x.detach().requires_grad_()
    output = fn(x)
    output = output[0] if isinstance(output, tuple) else output
    ones = torch.ones_like(output, requires_grad=True)
    (grad_x,) = torch.autograd.grad(output, x, ones, create_graph=True)
    return grad_x, x


@pytest.mark.parametrize(
    "fn", [SinhBad.apply, failures.SquareOnceDifferentiable.apply]
)
def test_no_path_back_to_x_is_told_apart_from_a_zero(fn, x):
    # grad_x = ones * (something without history): its only graph leads to the ones, so
    # plain autograd refuses to differentiate it with respect to x.
    grad_x, leaf = by_hand_with_ones_requiring_grad(fn, x)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad(grad_x.sum(), leaf)
    grad_out = "ones requiring grad"
    assert failures.second_derivative(fn, x, grad_out, no_path_as_zero=False) is None
    zero = failures.second_derivative(fn, x, grad_out)
    torch.testing.assert_close(zero, torch.zeros_like(x))


def test_a_path_that_gives_zero_is_not_called_no_path(x):
    # SinhDropsExtraGrads: grad_x is built from its saved extra outputs, which lead back to x
    # through the Function's own node; that node drops their gradients, so the second
    # derivative is a real, wrong zero (sinh x by hand), not a missing path.
    grad_x, leaf = by_hand_with_ones_requiring_grad(failures.sinh_drops_extra_grads, x)
    (by_autograd,) = torch.autograd.grad(grad_x.sum(), leaf)
    torch.testing.assert_close(by_autograd, torch.zeros_like(x))
    second = failures.second_derivative(
        failures.sinh_drops_extra_grads, x, "ones requiring grad", no_path_as_zero=False
    )
    assert second is not None
    torch.testing.assert_close(second, torch.zeros_like(x))


def test_once_differentiable_has_no_path_when_grad_out_depends_on_x(x):
    second = failures.second_derivative(
        failures.SquareOnceDifferentiable.apply, x, "depends on x", no_path_as_zero=False
    )
    assert second is None
    # A correct Function keeps its path with the same option: d²/dx² of ½ x⁴ is 6x².
    native = failures.second_derivative(lambda t: t**2, x, "depends on x",
                                        no_path_as_zero=False)  # fmt: skip
    torch.testing.assert_close(native, 6 * x.detach() ** 2)


SINH_LIKE_BROKEN = [
    pytest.param(SinhBad.apply, id="sinh-bad"),
    *BROKEN_SECOND_ORDER[:3],
]


@pytest.mark.parametrize("fn", SINH_LIKE_BROKEN)
def test_a_broken_sinh_is_silently_wrong_when_grad_out_depends_on_x(fn, x):
    # grad_out = sinh x carries the only path back to x: the cosh x term is lost, so
    # d²/dx² of ½ sinh² x comes out as cosh² x (by hand) instead of cosh 2x, with no error.
    native = native_hessian_diagonal(lambda t: (torch.sinh(t) ** 2).sum() / 2, x)
    second = failures.second_derivative(fn, x, "depends on x")
    torch.testing.assert_close(second, torch.cosh(x.detach()) ** 2)
    assert not torch.allclose(second, native)
    assert (second != 0).all()


def test_detaching_in_backward_is_silently_wrong_when_grad_out_depends_on_x(x):
    # d²/dx² of ½ x⁴ is 6x²; the detached x keeps only the term through grad_out, 4x².
    native = native_hessian_diagonal(lambda t: ((t**2) ** 2).sum() / 2, x)
    second = failures.second_derivative(failures.SquareDetachesInBackward.apply, x,
                                        "depends on x")  # fmt: skip
    torch.testing.assert_close(second, 4 * x.detach() ** 2)
    assert not torch.allclose(second, native)


@pytest.mark.parametrize(
    "fn", [SinhBad.apply, *(p.values[0] for p in BROKEN_SECOND_ORDER)]
)
def test_gradgradcheck_catches_every_broken_function(fn, x):
    with pytest.raises(GradcheckError):
        gradgradcheck(fn, (x,))


def test_once_differentiable_is_silent_when_other_terms_reach_x(x):
    def loss(t):
        return failures.SquareOnceDifferentiable.apply(t).sum() + (t**3).sum()

    native = native_hessian_diagonal(lambda t: (t**2).sum() + (t**3).sum(), x)
    torch.testing.assert_close(native, 2 + 6 * x.detach())  # by hand
    (grad_x,) = torch.autograd.grad(loss(x), x, create_graph=True)
    (by_grad,) = torch.autograd.grad(grad_x.sum(), x, retain_graph=True)
    x.grad = None
    grad_x.sum().backward()
    for second in (by_grad, x.grad):  # both without an error, both missing the 2
        torch.testing.assert_close(second, 6 * x.detach())
        assert not torch.allclose(second, native)


def test_once_differentiable_is_loud_on_backward_when_grad_out_depends_on_x(x):
    loss = (failures.SquareOnceDifferentiable.apply(x) ** 2).sum() / 2
    (grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        grad_x.sum().backward()


def test_hessian_needs_a_jvp_on_the_function_backward_calls_too(x):
    x = x.detach()
    with pytest.raises(AssertionError, match="flat_bdims must not be None"):
        torch.func.hessian(lambda t: failures.CubeJvpOnOuterOnly.apply(t).sum())(x)
    fixed = torch.func.hessian(lambda t: setup_context_style.Cube.apply(t).sum())(x)
    torch.testing.assert_close(fixed, torch.diag(6 * x))
