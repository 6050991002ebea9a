"""Laws every correct Function of the tutorial must satisfy, checked against native torch ops."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.autograd import gradcheck, gradgradcheck

from double_backward.graph_walks import reaches

from ..helpers import CORRECT_FUNCTIONS, derivatives

SHAPES = {
    "0-d": lambda: torch.randn((), dtype=torch.float64),
    "1-d": lambda: torch.randn(5, dtype=torch.float64),
    "3x3": lambda: torch.randn(3, 3, dtype=torch.float64),
    "non-contiguous": lambda: torch.randn(4, 6, dtype=torch.float64)[:, ::2],
}


@pytest.mark.parametrize(("ours", "native"), CORRECT_FUNCTIONS)
@pytest.mark.parametrize("make_input", SHAPES.values(), ids=SHAPES.keys())
def test_gradcheck_and_gradgradcheck_pass_for_every_shape(ours, native, make_input):
    torch.manual_seed(0)
    x = make_input().requires_grad_()
    assert gradcheck(ours, (x,))
    assert gradgradcheck(ours, (x,))


def test_non_contiguous_shape_really_is_non_contiguous():
    assert not SHAPES["non-contiguous"]().is_contiguous()


moderate_values = hnp.arrays(
    "float64",
    hnp.array_shapes(min_dims=0, max_dims=2, max_side=4),
    elements=st.floats(-4, 4, allow_nan=False),
)


@pytest.mark.parametrize(("ours", "native"), CORRECT_FUNCTIONS)
@settings(max_examples=15, deadline=None)
@given(values=moderate_values)
def test_gradcheck_and_gradgradcheck_pass_for_generated_values(ours, native, values):
    x = torch.from_numpy(values).requires_grad_()
    assert gradcheck(ours, (x,))
    assert gradgradcheck(ours, (x,))


@pytest.mark.parametrize(("ours", "native"), CORRECT_FUNCTIONS)
@settings(max_examples=40, deadline=None)
@given(
    values=hnp.arrays(
        "float64",
        hnp.array_shapes(min_dims=1, max_dims=1, max_side=6),
        elements=st.floats(-700, 700, allow_nan=False),
    )
)
def test_value_and_three_derivatives_match_native_for_generated_values(
    ours, native, values
):
    x = torch.from_numpy(values)
    for order, (got, expected) in enumerate(
        zip(derivatives(ours, x, 3), derivatives(native, x, 3), strict=True)
    ):
        torch.testing.assert_close(
            got,
            expected,
            rtol=1e-11,
            atol=1e-12,
            msg=lambda m, order=order: f"order {order}: {m}",
        )


# 0, negatives, magnitudes where exp (and x**2, x**3) overflow, and the non-finite values.
# Not 709.8 < |x| < 710.5, where sinh(x) is finite but exp(x) is not: there torch.sinh itself is
# inf on its vectorised path and finite on its scalar path (see test_saving_intermediates.py).
EDGE_VALUES = [
    0.0,
    -0.0,
    -1.5,
    -3.0,
    1e-8,
    -1e-8,
    709.0,
    -709.0,
    720.0,
    -720.0,
    1e103,
    -1e103,
    1e200,
    float("inf"),
    float("-inf"),
    float("nan"),
]


@pytest.mark.parametrize(("ours", "native"), CORRECT_FUNCTIONS)
def test_value_and_three_derivatives_match_native_at_edge_values(ours, native):
    x = torch.tensor(EDGE_VALUES, dtype=torch.float64)
    for order, (got, expected) in enumerate(
        zip(derivatives(ours, x, 3), derivatives(native, x, 3), strict=True)
    ):
        torch.testing.assert_close(
            got,
            expected,
            rtol=1e-11,
            atol=1e-12,
            equal_nan=True,
            msg=lambda m, order=order: f"order {order}: {m}",
        )


def test_edge_values_include_overflow_for_every_native_op():
    # Guards the test above: each native op must really overflow somewhere in EDGE_VALUES.
    x = torch.tensor(EDGE_VALUES, dtype=torch.float64)
    for param in CORRECT_FUNCTIONS:
        _, native = param.values
        finite_input = torch.isfinite(x)
        assert torch.isinf(native(x)[finite_input]).any(), param.id


@pytest.mark.parametrize(("ours", "native"), CORRECT_FUNCTIONS)
def test_second_order_graph_reaches_the_input(ours, native):
    x = torch.tensor([0.5, -1.25], dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(ours(x).sum(), x, create_graph=True)
    assert grad_x.grad_fn is not None
    assert reaches(grad_x, x)
