"""central_difference alone: the right derivative where it decides, and undecided (with the
reason) where no step can decide. Every expected value is an analytic derivative."""

from __future__ import annotations

import pytest
import torch

from double_backward.checker.shared import finite_differences as fd
from double_backward.checker.shared.finite_differences import (
    Difference,
    central_difference,
)


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    ("f", "derivative"),
    [
        (lambda x: x**3, lambda x: 3 * x**2),
        (
            lambda x: torch.sin(3 * x).exp(),
            lambda x: 3 * torch.cos(3 * x) * torch.sin(3 * x).exp(),
        ),
        (
            lambda x: 1e6 + x,
            lambda x: torch.ones_like(x),
        ),  # large values, small derivative
        (
            lambda x: torch.exp(20 * x),
            lambda x: 20 * torch.exp(20 * x),
        ),  # strongly curved
        (torch.tanh, lambda x: 1 - torch.tanh(x) ** 2),
    ],
    ids=["cube", "exp-sin", "offset", "exp20x", "tanh"],
)
def test_smooth_functions_are_decided_with_the_analytic_derivative(f, derivative):
    x, u = _randn(200, seed=1) * 0.3, _randn(200, seed=2)
    result = central_difference(lambda t: f(x + t * u), dtype=torch.float64)
    assert result.decided and result.reason == ""
    assert result.step in fd.STEPS[torch.float64]
    assert _relative(result.value, derivative(x) * u) < 1e-6


def test_a_matrix_function_is_decided():
    a, b = _randn(5, 5, seed=3), _randn(5, 5, seed=4)
    result = central_difference(
        lambda t: torch.linalg.inv(a + t * b), dtype=torch.float64
    )
    inverse = torch.linalg.inv(a)
    assert result.decided
    assert _relative(result.value, -inverse @ b @ inverse) < 1e-6


@pytest.mark.parametrize("seed", range(4))
def test_relu_of_a_matmul_is_decided_where_no_preactivation_is_zero(seed):
    # 128 x 256 outputs: a step of 1e-2 crosses many kinks, so a smaller one is chosen.
    x, w = _randn(128, 64, seed=seed), _randn(64, 256, seed=seed + 10)
    ux, uw = _randn(128, 64, seed=seed + 20), _randn(64, 256, seed=seed + 30)
    result = central_difference(lambda t: torch.relu((x + t * ux) @ (w + t * uw)),
                                dtype=torch.float64)  # fmt: skip
    expected = ((x @ w) > 0) * (ux @ w + x @ uw)
    assert result.decided
    assert result.step < 1e-2
    assert _relative(result.value, expected) < 1e-6


def test_relu_of_a_matmul_with_exact_zeros_in_the_preactivation_is_undecided():
    # A zero row of x (timm's zero-initialised last BatchNorm): relu has no derivative there
    # along any direction that moves its pre-activation, at every step.
    x, w = _randn(16, 32, seed=5), _randn(32, 8, seed=6)
    x[3] = 0.0
    ux, uw = _randn(16, 32, seed=7), _randn(32, 8, seed=8)
    assert bool(((x @ w) == 0).any())
    result = central_difference(lambda t: torch.relu((x + t * ux) @ (w + t * uw)),
                                dtype=torch.float64)  # fmt: skip
    assert result == Difference(None, None, False, fd.KINK)


def test_relu_of_a_scalar_weighting_with_exact_zeros_is_undecided():
    # The same kink seen through a scalar (v^T f), as in a vector-Jacobian check.
    x, w, v = _randn(16, 32, seed=5), _randn(32, 8, seed=6), _randn(16, 8, seed=9)
    x[3] = 0.0
    ux = _randn(16, 32, seed=7)
    result = central_difference(lambda t: (v * torch.relu((x + t * ux) @ w)).sum(),
                                dtype=torch.float64)  # fmt: skip
    assert not result.decided and result.reason == fd.KINK


def test_abs_at_zero_is_undecided_and_decided_where_the_direction_does_not_move_it():
    x = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)
    moving = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    assert central_difference(
        lambda t: (x + t * moving).abs(), dtype=torch.float64
    ).reason == (fd.KINK)
    still = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    result = central_difference(lambda t: (x + t * still).abs(), dtype=torch.float64)
    assert result.decided
    assert torch.allclose(
        result.value, torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64)
    )


def test_a_kink_near_but_not_at_zero_is_stepped_around():
    # relu(x + t) with x = -1e-3: the kink at t = 1e-3 is inside the largest steps only.
    x = torch.tensor([-1e-3, 0.5], dtype=torch.float64)
    result = central_difference(lambda t: torch.relu(x + t), dtype=torch.float64)
    assert result.decided and result.step <= 1e-3
    assert torch.allclose(result.value, torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_a_jump_is_undecided():
    # A jump in the value (a Heaviside step) grows like 1/h, as rounding does.
    x = torch.tensor([0.0, 0.3], dtype=torch.float64)
    result = central_difference(
        lambda t: (x + t > 0).to(torch.float64), dtype=torch.float64
    )
    assert not result.decided and result.reason == fd.DISAGREE


def test_a_float32_island_in_a_float64_function_is_decided_at_a_larger_step():
    # tanh computed in float32 inside a float64 function: the smallest steps only see float32
    # rounding, the largest ones curvature; a step between decides, to float32's accuracy.
    x, u = _randn(50, seed=0), _randn(50, seed=11)

    def island(t):
        return torch.tanh(2 * (x + t * u).float()).double() ** 2

    result = central_difference(island, dtype=torch.float64)
    tanh = torch.tanh(2 * x)
    assert result.decided and result.step >= 1e-3
    assert _relative(result.value, 2 * tanh * (1 - tanh**2) * 2 * u) < 1e-4


def test_the_defaults_follow_the_dtype_computed_in():
    # A float32 result, though float64 was announced: float32's steps.
    x, u = (
        _randn(50, seed=0, dtype=torch.float32),
        _randn(50, seed=1, dtype=torch.float32),
    )
    result = central_difference(lambda t: torch.sin(x + t * u), dtype=torch.float64)
    assert result.decided and result.step in fd.STEPS[torch.float32]
    assert _relative(result.value.float(), torch.cos(x) * u) < 1e-3


def test_rounding_noise_at_every_step_is_undecided():
    generator = torch.Generator().manual_seed(0)
    x = _randn(20, seed=3)

    def noisy(t):
        return x + t + 1e-5 * torch.randn(20, generator=generator, dtype=torch.float64)

    assert central_difference(noisy, dtype=torch.float64).reason == fd.DISAGREE


def test_non_finite_values_are_undecided():
    x = torch.tensor([0.0, 1.0], dtype=torch.float64)
    result = central_difference(lambda t: torch.log(x + t), dtype=torch.float64)
    assert result == Difference(None, None, False, fd.NON_FINITE)


def test_a_constant_is_decided_as_zero_and_scale_keeps_rounding_from_deciding():
    x = _randn(10, seed=4)
    result = central_difference(lambda t: x.clone(), dtype=torch.float64)
    assert result.decided and not result.value.any()
    # Rounding of a zero derivative, judged against the size it will be compared with.
    y = _randn(10, seed=5)
    result = central_difference(lambda t: (y + t) - t, dtype=torch.float64, scale=1.0)
    assert result.decided and float(result.value.abs().max()) < 1e-6


def test_complex_values():
    z, u = (
        _randn(10, seed=6).to(torch.complex128),
        _randn(10, seed=7).to(torch.complex128),
    )
    result = central_difference(lambda t: (z + t * u) ** 2, dtype=torch.complex128)
    assert result.decided and _relative(result.value, 2 * z * u) < 1e-8


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="steps must be positive"):
        central_difference(lambda t: torch.zeros(1), dtype=torch.float64, steps=[0.0])
    with pytest.raises(TypeError, match="must return a tensor"):
        central_difference(lambda t: 1.0, dtype=torch.float64)  # type: ignore[arg-type,return-value]


def test_a_step_leaving_the_domain_is_skipped_and_an_error_at_every_step_is_raised():
    def inside(t):
        if abs(t) > 2e-3:
            raise ValueError("outside the domain")
        return torch.tensor([t * 3.0], dtype=torch.float64)

    result = central_difference(inside, dtype=torch.float64)
    assert result.decided and result.step <= 1e-3
    assert float(result.value) == pytest.approx(3.0)

    def broken(t):
        if t != 0:
            raise RuntimeError("broken")
        return torch.zeros(1, dtype=torch.float64)

    with pytest.raises(RuntimeError, match="broken"):
        central_difference(broken, dtype=torch.float64)


# -- settled: a rejected value tried again at finer steps (issue 37) -----------------------
def _staircase(at: float):
    """round(at + t, decimals=3) with its derivative, 0 between the stairs."""
    return lambda t: torch.round(
        torch.tensor([at + t], dtype=torch.float64), decimals=3
    )


def test_a_staircase_looks_smooth_at_a_large_step_and_flat_below_its_stairs():
    along = _staircase(0.2)
    coarse = central_difference(along, dtype=torch.float64)
    # Across many stairs of 1e-3, the staircase has the slope of the identity.
    assert coarse.decided and float(coarse.value) == pytest.approx(1.0, abs=0.05)
    found = fd.settled(
        along, coarse, lambda value: abs(float(value)) < 1e-3, dtype=torch.float64
    )
    assert found.decided and found.refined and float(found.value) == 0.0
    assert found.step <= coarse.step / fd.FINER


def test_a_value_that_does_not_change_with_the_step_is_kept():
    # A smooth function whose derivative (2) a wrong backward would not match: kept.
    along = lambda t: torch.tensor([2.0 * (0.3 + t)], dtype=torch.float64)  # noqa: E731
    coarse = central_difference(along, dtype=torch.float64)
    found = fd.settled(along, coarse, lambda value: False, dtype=torch.float64)
    assert found == coarse and not found.refined


def test_a_jump_at_the_point_keeps_the_value_found():
    # 1e-13 from a stair's edge: every step below the stairs crosses the jump, and no finer
    # step decides; the value stands (as gradcheck fails there too), never a pass.
    along = _staircase(0.0005 + 1e-13)
    coarse = central_difference(along, dtype=torch.float64)
    assert coarse.decided
    found = fd.settled(
        along, coarse, lambda value: abs(float(value)) < 1e-3, dtype=torch.float64
    )
    assert found == coarse


def test_a_read_only_zero_tensor_is_differenced():
    # What torch returns for a derivative it knows is zero (sgn's second derivative).
    zero = torch._efficientzerotensor(3, dtype=torch.float64)
    assert zero._is_zerotensor()
    found = central_difference(lambda t: zero, dtype=torch.float64, scale=1.0)
    assert found.decided and torch.equal(
        found.value, torch.zeros(3, dtype=torch.float64)
    )


def test_a_known_centre_is_used_and_along_is_not_called_at_zero():
    x, u = _randn(50), _randn(50, seed=1)
    called = []

    def along(t):
        called.append(t)
        return torch.sin(x + t * u)

    found = central_difference(along, dtype=torch.float64, center=torch.sin(x))
    assert 0.0 not in called
    assert _relative(found.value, torch.cos(x) * u) < 1e-8  # the analytic derivative


def test_finiteness_is_read_from_the_norm_and_scanned_only_when_it_overflows():
    huge = torch.full((4,), 1e200, dtype=torch.float64)  # finite, but its norm overflows
    assert not torch.isfinite(torch.linalg.vector_norm(huge))
    assert fd.all_finite(huge, float(torch.linalg.vector_norm(huge)))
    for bad in (float("nan"), float("inf")):
        t = torch.ones(4, dtype=torch.float64)
        t[2] = bad
        assert not fd.all_finite(t, float(torch.linalg.vector_norm(t)))
    # Finite values whose norm overflows are differenced, not refused as non-finite.
    found = central_difference(lambda t: 1e200 * (1 + t) * torch.ones(4, dtype=torch.float64),
                               dtype=torch.float64)  # fmt: skip
    assert found.decided and float(found.value[0]) == pytest.approx(1e200)
