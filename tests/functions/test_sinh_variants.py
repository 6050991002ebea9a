"""The Sinh variants the costs page measures: all correct to the second derivative."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward import Sinh, sinh
from double_backward.functions.sinh_variants import (
    SinhNativeOps,
    SinhRecompute,
    sinh_materialized,
    sinh_out_of_place,
    sinh_tutorial,
)

from ..helpers import derivatives

VARIANTS = [
    pytest.param(sinh_tutorial, id="tutorial"),
    pytest.param(sinh_out_of_place, id="out_of_place"),
    pytest.param(sinh_materialized, id="materialized"),
    pytest.param(SinhRecompute.apply, id="recompute"),
    pytest.param(SinhNativeOps.apply, id="native_ops"),
]


@pytest.mark.parametrize("fn", VARIANTS)
def test_variant_matches_torch_sinh_to_the_third_derivative(fn):
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)
    ours_and_native = zip(derivatives(fn, x, 3), derivatives(torch.sinh, x, 3), strict=True)
    for ours, native in ours_and_native:
        torch.testing.assert_close(ours, native)


@pytest.mark.parametrize("fn", VARIANTS)
def test_variant_passes_gradcheck_and_gradgradcheck(fn):
    x = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


@pytest.mark.parametrize("fn", VARIANTS)
def test_variant_refuses_a_list_naming_itself(fn):
    with pytest.raises(TypeError, match="Sinh.*must be a torch.Tensor"):
        fn([1.0])


@pytest.mark.parametrize("fn", [sinh_tutorial, sinh_materialized])
def test_materialised_zeros_turn_an_overflow_into_nan(fn):
    # e^100 overflows float32, so backward computes 0 · inf for the unused outputs: nan.
    x = torch.tensor([100.0, 1.0])
    grad = derivatives(fn, x, 1)[1]
    assert torch.isnan(grad[0])
    torch.testing.assert_close(grad[1], torch.cosh(x[1]))


@pytest.mark.parametrize("fn", [sinh, sinh_out_of_place])
def test_unmaterialised_gradient_overflows_to_inf_like_torch_cosh(fn):
    x = torch.tensor([100.0, 1.0])
    grad = derivatives(fn, x, 1)[1]
    assert torch.isinf(torch.cosh(x[0])) and torch.isinf(grad[0])
    torch.testing.assert_close(grad[1], torch.cosh(x[1]))


@pytest.mark.parametrize("output", [1, 2])
def test_each_extra_output_alone_differentiates_twice(output):
    # e^x/2 alone and e^-x/2 alone: backward gets a gradient for one extra output only.
    x = torch.linspace(-2, 2, 5, dtype=torch.float64, requires_grad=True)
    sign = 1 if output == 1 else -1
    values = derivatives(lambda t: Sinh.apply(t)[output], x.detach(), 2)
    expected = torch.exp(sign * x.detach()) / 2
    torch.testing.assert_close(values[1], sign * expected)
    torch.testing.assert_close(values[2], expected)
    assert gradgradcheck(lambda t: Sinh.apply(t)[output], (x,))
