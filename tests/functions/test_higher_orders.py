"""Sin and Cos: differentiable to any order, checked against torch.sin to the sixth."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward.functions.higher_orders import Cos, Sin

from ..helpers import derivatives


@pytest.mark.parametrize(
    ("ours", "native"), [(Sin.apply, torch.sin), (Cos.apply, torch.cos)]
)
def test_six_derivatives_match_native(ours, native):
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    for order, (got, expected) in enumerate(
        zip(derivatives(ours, x, 6), derivatives(native, x, 6), strict=True)
    ):
        torch.testing.assert_close(
            got, expected, msg=lambda m, o=order: f"order {o}: {m}"
        )


@pytest.mark.parametrize("ours", [Sin.apply, Cos.apply])
def test_checks_pass(ours):
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert gradcheck(ours, (x,))
    assert gradgradcheck(ours, (x,))


def test_fourth_derivative_of_sin_is_sin_again():
    x = torch.tensor([0.3, 1.1], dtype=torch.float64)
    torch.testing.assert_close(derivatives(Sin.apply, x, 4)[4], torch.sin(x))


@pytest.mark.parametrize("order", [-1, 1.5, "2"])
def test_derivatives_rejects_an_order_that_is_not_a_whole_number(order):
    with pytest.raises(ValueError, match="'order' must be a whole number"):
        derivatives(torch.sin, torch.ones(2), order)
