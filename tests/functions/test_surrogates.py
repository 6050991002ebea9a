"""Surrogate-gradient Functions against the detach trick in native ops, to third order.

Each surrogate has a native twin built with the detach trick: value from forward, gradient
from a smooth s(x) (``s(x) + (forward(x) - s(x)).detach()``), differentiated by autograd.
Expected values come from it and from analytic s'' (never from the Function under test).
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward import check
from double_backward.functions.higher_orders import derivatives
from double_backward.functions.surrogates import (
    ClampPassThrough,
    FastSigmoidSpike,
    FastSigmoidSpikeSavesSurrogate,
    GradientReversal,
    RoundSTE,
)

SLOPE = 5.0
REVERSAL = 0.5


def straight_through(forward, surrogate):
    """The detach trick: forward's value, surrogate's derivatives."""

    def fn(x):
        smooth = surrogate(x)
        return smooth + (forward(x) - smooth).detach()

    return fn


def fast_sigmoid(x):
    return x / (1 + SLOPE * x.abs())


SURROGATES = [
    pytest.param(
        RoundSTE.apply, straight_through(torch.round, lambda t: t), id="RoundSTE"
    ),
    pytest.param(
        lambda t: GradientReversal.apply(t, REVERSAL),
        straight_through(lambda t: t, lambda t: -REVERSAL * t),
        id="GradientReversal",
    ),
    pytest.param(
        ClampPassThrough.apply,
        straight_through(lambda t: t.clamp(-1, 1), lambda t: t),
        id="ClampPassThrough",
    ),
    pytest.param(
        lambda t: FastSigmoidSpike.apply(t, SLOPE),
        straight_through(lambda t: (t > 0).to(t.dtype), fast_sigmoid),
        id="FastSigmoidSpike",
    ),
]


@pytest.fixture
def x():
    # Away from the kinks of |x| and the rounding and clamping boundaries.
    return torch.tensor(
        [0.3, -1.7, 2.2, -0.05], dtype=torch.float64, requires_grad=True
    )


@pytest.mark.parametrize(("ours", "reference"), SURROGATES)
def test_matches_the_detach_trick_to_third_order(ours, reference, x):
    for mine, theirs in zip(
        derivatives(ours, x, 3), derivatives(reference, x, 3), strict=True
    ):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize(("ours", "reference"), SURROGATES)
def test_the_mixed_term_of_a_gradient_penalty_matches(ours, reference, x):
    w = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)

    def penalty_gradient(fn):
        (grad_x,) = torch.autograd.grad((w * fn(x) ** 2).sum(), x, create_graph=True)
        return torch.autograd.grad(grad_x.pow(2).sum(), w)[0]

    torch.testing.assert_close(penalty_gradient(ours), penalty_gradient(reference))


@pytest.mark.parametrize(("ours", "reference"), SURROGATES)
def test_gradcheck_sees_a_surrogate_and_gradgradcheck_passes(ours, reference, x):
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradcheck(ours, (x,))
    assert gradgradcheck(ours, (x,))


def test_the_spike_second_derivative_is_the_analytic_one(x):
    second = derivatives(lambda t: FastSigmoidSpike.apply(t, SLOPE), x, 2)[2]
    expected = -2 * SLOPE * torch.sign(x) / (1 + SLOPE * x.abs()) ** 3
    torch.testing.assert_close(second, expected.detach())


def test_saving_the_surrogate_from_forward_loses_its_second_derivative(x):
    broken = lambda t: FastSigmoidSpikeSavesSurrogate.apply(t, SLOPE)  # noqa: E731
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(broken, (x,))
    report = check(broken, x, surrogate_gradient=True)
    assert report.problem_names() == {"saved-intermediate"}


@pytest.mark.parametrize(("ours", "reference"), SURROGATES)
def test_the_checker_accepts_each_in_surrogate_mode_only(ours, reference, x):
    assert check(ours, x, surrogate_gradient=True).ok
    assert check(ours, x).problem_names() == {"first-order"}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: RoundSTE.apply([1.0]), TypeError, "RoundSTE"),
        (
            lambda: GradientReversal.apply(torch.ones(2), "1"),
            TypeError,
            "'lambda_' must be",
        ),
        (
            lambda: ClampPassThrough.apply(torch.ones(2), 1.0, -1.0),
            ValueError,
            "min <= max",
        ),
        (
            lambda: FastSigmoidSpike.apply(torch.ones(2), 0.0),
            ValueError,
            "'slope' must be",
        ),
        (
            lambda: FastSigmoidSpikeSavesSurrogate.apply(torch.ones(2), -1),
            ValueError,
            "'slope' must be",
        ),
    ],
)
def test_bad_arguments_are_refused_clearly(call, error, message):
    with pytest.raises(error, match=message):
        call()
