"""In-place Functions: the correct ones match native torch to third order; the broken ones fail
exactly as the in-place page says.

Expected values come from native torch (``x.clone().exp_()``, ``x**2``), analytic derivatives
(d/dx x² = 2x) and gradcheck/gradgradcheck, never from the Function under test.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.higher_orders import derivatives
from double_backward.functions.inplace import (
    ExpInplace,
    ExpInplaceSavesInputCopy,
    ReturnsInputAsIs,
    SquareEditsGradOut,
    SquareInplaceSavesInput,
)


@pytest.fixture
def x():
    return torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)


def exp_inplace(x):
    return ExpInplace.apply(x.clone())  # a leaf that requires grad cannot be edited


def test_exp_inplace_passes_gradcheck_and_gradgradcheck(x):
    assert gradcheck(exp_inplace, (x,))
    assert gradgradcheck(exp_inplace, (x,))


def test_exp_inplace_matches_native_exp_inplace_to_third_order(x):
    ours = derivatives(exp_inplace, x, 3)
    native = derivatives(lambda t: t.clone().exp_(), x, 3)
    for mine, theirs in zip(ours, native, strict=True):
        torch.testing.assert_close(mine, theirs)
    torch.testing.assert_close(ours[3], torch.exp(x.detach()))


def test_exp_inplace_edits_its_input_and_returns_it():
    a = torch.tensor([0.0, 1.0], dtype=torch.float64)
    out = ExpInplace.apply(a)
    assert out.data_ptr() == a.data_ptr()
    torch.testing.assert_close(a, torch.tensor([1.0, torch.e], dtype=torch.float64))


def test_exp_inplace_refuses_a_leaf_that_requires_grad_before_editing_it(x):
    before = x.detach().clone()
    with pytest.raises(
        ValueError, match=r"leaf tensor that requires grad.*x\.clone\(\)"
    ):
        ExpInplace.apply(x)
    torch.testing.assert_close(x.detach(), before)


def test_without_that_check_torch_refuses_only_after_the_edit(x):
    # What ExpInplace's own check prevents: torch's refusal comes after forward ran.
    before = x.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        SquareInplaceSavesInput.apply(x)
    torch.testing.assert_close(x.detach(), before**2)


def test_saving_a_copy_of_the_input_breaks_only_the_second_order(x):
    fn = lambda t: ExpInplaceSavesInputCopy.apply(t.clone())  # noqa: E731
    assert gradcheck(fn, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(fn, (x,))


def test_saving_the_input_then_editing_it_gives_a_wrong_first_derivative(x):
    out = SquareInplaceSavesInput.apply(x.clone())
    (grad_x,) = torch.autograd.grad(out.sum(), x)  # no error raised
    torch.testing.assert_close(out, x.detach() ** 2)  # the value is right
    torch.testing.assert_close(grad_x, 2 * x.detach() ** 2)  # 2x², not 2x
    assert not torch.allclose(grad_x, 2 * x.detach())
    assert not gradcheck(
        lambda t: SquareInplaceSavesInput.apply(t.clone()), (x,), raise_exception=False
    )


def test_returning_the_input_as_is_supports_double_backward(x):
    assert gradcheck(ReturnsInputAsIs.apply, (x,))
    assert gradgradcheck(ReturnsInputAsIs.apply, (x,))


def test_an_input_returned_as_is_refuses_in_place_edits(x):
    out = ReturnsInputAsIs.apply(x * 1.0)
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        out.mul_(3)
    a = x * 1.0
    out = ReturnsInputAsIs.apply(a)
    a.mul_(3)
    with pytest.raises(RuntimeError, match="its base or another view of its base"):
        torch.autograd.grad(out.sum(), x)


def test_editing_grad_out_in_place_fails_on_a_summed_loss(x):
    with pytest.raises(RuntimeError, match="more than one element of the written-to"):
        torch.autograd.grad(SquareEditsGradOut.apply(x).sum(), x)


def test_editing_grad_out_in_place_is_silently_wrong_in_a_residual_branch(x):
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)

    def residual_grad(square):
        h = x * 1.0
        return torch.autograd.grad(((h + square(h)) * w).sum(), x)[0]

    expected = w * (1 + 2 * x.detach())  # d/dx (x + x²) · w
    torch.testing.assert_close(residual_grad(lambda h: h**2), expected)
    assert not torch.allclose(residual_grad(SquareEditsGradOut.apply), expected)


def test_editing_grad_out_in_place_fails_gradgradcheck(x):
    assert gradcheck(SquareEditsGradOut.apply, (x,))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        gradgradcheck(SquareEditsGradOut.apply, (x,))


@pytest.mark.parametrize(
    "function",
    [ExpInplace, ExpInplaceSavesInputCopy, SquareInplaceSavesInput, ReturnsInputAsIs,
     SquareEditsGradOut],
)  # fmt: skip
def test_bad_input_is_refused_with_the_function_named(function):
    with pytest.raises(TypeError, match=function.__name__):
        function.apply([1.0, 2.0])
