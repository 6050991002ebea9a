"""Every tensor and generator check() (and the command line) makes follows the inputs'
device. Run under ``torch.set_default_device("meta")`` with CPU inputs: a tensor made without
the inputs' device lands on meta, and mixing it with a CPU tensor raises (or a meta value
cannot be read), so any such tensor fails the check. The verdicts must equal those made
without the default device."""

from __future__ import annotations

import pytest
import torch

from double_backward import Square, check
from double_backward.checker import main
from double_backward.functions import failures

from .checker_corpus import PATTERNS, ReLUMask, RMSNormSavesRstd


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)  # fmt: skip


def _pattern(pattern_id):
    (found,) = [p for p in PATTERNS if p.id == pattern_id]
    return found


CASES = {
    "square (passes)": lambda: (Square.apply, (_randn(3, 4),)),
    "relu-mask (passes)": lambda: (ReLUMask.apply, (_randn(300),)),
    "saves-intermediate (fails)": lambda: (failures.SinhSavesIntermediate.apply,
                                           (_randn(3, 4),)),
    "rms-norm (fails, large)": lambda: (RMSNormSavesRstd.apply,
                                        (_randn(100, 20), _randn(20).abs() + 0.5, 1e-6)),
    "qpth (fails)": lambda: (_pattern("qpth-lu-in-a-tuple-on-ctx").fn,
                             _pattern("qpth-lu-in-a-tuple-on-ctx").inputs(
                                 100, torch.Generator().manual_seed(0))),
    "rope (fails)": lambda: (_pattern("unsloth-rope-inplace-grad").fn,
                             _pattern("unsloth-rope-inplace-grad").inputs(
                                 1000, torch.Generator().manual_seed(0))),
}  # fmt: skip


@pytest.fixture
def meta_default():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def _verdict(fn, args):
    report = check(fn, *args, third_order=True)
    return report.problem_names(), report.verdict, dict(report.results)


@pytest.mark.parametrize("name", list(CASES))
def test_check_makes_nothing_on_the_default_device(name, meta_default):
    torch.set_default_device(None)
    fn, args = CASES[name]()
    expected = _verdict(fn, args)
    torch.set_default_device("meta")
    assert _verdict(fn, args) == expected


def test_a_tensor_made_without_a_device_would_be_caught(meta_default):
    # The premise of the tests above: the default device reaches a tensor made without one.
    x = _randn(3)
    torch.set_default_device("meta")
    with pytest.raises(RuntimeError):
        float((x * torch.ones(3)).sum())


def test_the_command_line_takes_a_device_and_draws_the_same_inputs(
    capsys, meta_default
):
    torch.set_default_device(None)
    argv = ["double_backward:SinhBad", "--shape", "3,3", "--json"]
    assert main(argv) == 1
    expected = capsys.readouterr().out
    torch.set_default_device("meta")
    assert main([*argv, "--device", "cpu"]) == 1
    assert capsys.readouterr().out == expected
    assert main([*argv, "--device", "nonsense"]) == 2
    assert "not a device" in capsys.readouterr().err
