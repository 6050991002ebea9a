"""benchmarks/functions.py --device: issue 28's attention targets, its code path on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "functions.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bench_functions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_device_attention_run_measures_every_side_and_target_on_the_cpu(capsys):
    bench = load_script()
    shape = (1, 2, 16, 8)
    results = bench.measure_device_attention(torch.device("cpu"), shape, rounds=1)
    assert set(results["sides"]) == {"ops", "MATH", "default kernel"}
    for side in ("ops", "MATH"):
        row = results["sides"][side]
        assert row["forward_backward_seconds"] > 0
        assert row["gradient_penalty_seconds"] > 0
        assert row["gradient_penalty_peak_bytes"] > 0
    # The default CPU kernel (flash) has no double backward: recorded, not a crash.
    default = results["sides"]["default kernel"]
    assert default["gradient_penalty_seconds"] is None
    assert "not implemented" in default["gradient_penalty_error"]
    targets = {row["target"]: row for row in results["targets"]}
    assert set(targets) == set(bench.DEVICE_TARGETS)
    # Half precision keeps float32 statistics: the error is MATH's, within the 1.2x target.
    assert targets["bfloat16_error"]["met"] and targets["float16_error"]["met"]
    bench.print_device_attention(torch.device("cpu"), shape, results)
    printed = capsys.readouterr().out
    assert "target gradient_penalty_peak_memory" in printed and "raises" in printed
