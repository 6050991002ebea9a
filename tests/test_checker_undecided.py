"""check() never passes on no evidence: where no direction's central differences decide
(every one crosses a kink) and the inputs are too large for gradcheck, the verdict is
"could not decide at these inputs"; where they do decide, a correct function passes."""

from __future__ import annotations

import pytest
import torch

from double_backward import check

from .checker_corpus import ReLUMask


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)  # fmt: skip


def relu_of_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w)


@pytest.mark.parametrize("seed", range(3))
def test_relu_of_a_matmul_at_128_by_256_passes(seed):
    # Correct by construction (native torch): no kink is at its input, so steps are found.
    x, w = _randn(128, 64, seed=seed), _randn(64, 256, seed=seed + 100)
    report = check(relu_of_matmul, x, w, seed=seed)
    assert report.ok, str(report)
    assert "decided" not in report.results["order 1, yours"]


@pytest.mark.parametrize("gap", [1e-7, 1e-6, 3e-6])
@pytest.mark.parametrize("seed", range(3))
def test_relu_of_a_matmul_with_a_preactivation_next_to_its_kink_passes(seed, gap):
    # One pre-activation `gap` from 0: a fixed step of 1e-6 crossed its kink and reported
    # "first-order" (on 278d50d, all nine cases); a step chosen per direction steps around it.
    x, w = _randn(128, 64, seed=seed), _randn(64, 256, seed=seed + 100)
    column = w[:, 0]
    x[0] += (gap - x[0] @ column) * column / (column @ column)
    assert float((x @ w)[0, 0]) == pytest.approx(gap, rel=1e-3)
    report = check(relu_of_matmul, x, w, seed=seed)
    assert report.ok, str(report)


def test_a_relu_at_exact_zeros_is_undecided_not_passed():
    # Half the inputs exactly 0: every direction crosses relu's kink there, at every step.
    x = _randn(2000).clamp(min=0)
    assert bool((x == 0).sum() > 500)
    report = check(ReLUMask.apply, x)
    assert not report.ok
    assert report.problem_names() == {"undecided"}, str(report)
    (problem,) = report.problems
    assert problem.diagnosis.startswith("could not decide at these inputs")
    assert "kink crossed" in problem.diagnosis
    assert (
        "Try other inputs" in problem.diagnosis and "smaller size" in problem.diagnosis
    )
    assert report.verdict.startswith(
        "PROBLEM [undecided] could not decide at these inputs"
    )
