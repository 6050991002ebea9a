"""docs/_ext/cuda_results.py: the CUDA probes' code path (on the CPU), the JSON, the rendering."""

from __future__ import annotations

import datetime
import json

import cuda_results
import pytest
import torch
from builtins_table import NO_FIX, render
from error_index import cuda_sections, cuda_title
from versioned_results import Measurement

from double_backward.checker.model import FIXES


def test_the_committed_file_is_issue_28s_h200_measurement_labelled_with_its_source():
    (data,) = cuda_results.load()
    assert (data["device"], data["torch_build"], data["measured"]) == (
        "NVIDIA H200",
        "2.11.0+cu130",
        "2026-12-04",
    )
    assert data["source"].startswith("issue 28's text")
    results = data["results"]
    # The issue: every fused backend raises in float16, bfloat16 and float32; MATH works.
    for backend, operator in (
        ("FLASH_ATTENTION", "_scaled_dot_product_flash_attention"),
        ("EFFICIENT_ATTENTION", "_scaled_dot_product_efficient_attention"),
        ("CUDNN_ATTENTION", "_scaled_dot_product_cudnn_attention"),
    ):
        for dtype in ("float16", "bfloat16", "float32"):
            cell = f"{cuda_results.SDPA} | sdpa_kernel(SDPBackend.{backend}) | {dtype}"
            assert operator + "_backward" in results[cell]
            assert (
                results[f"{cuda_results.SDPA} | sdpa_kernel(SDPBackend.MATH) | {dtype}"]
                is None
            )
    cost = {
        (row["dtype"], row["kernel"]): row for row in data["attention_cost"]["rows"]
    }
    assert cost[("bfloat16", "MATH")]["gradient_penalty_ms"] == 132
    assert cost[("bfloat16", "ops, blocks of 2^27")]["penalty_peak_gb"] == 12.8


def test_the_probes_run_on_the_cpu_and_what_raises_is_the_cpu_flash_kernel():
    # The code path nox -s matrix -- --device cuda takes, on the CPU: on CUDA the same probes
    # meet the fused kernels instead.
    results = cuda_results.measure("cpu")
    assert len(results) == sum(len(dtypes) for _, _, dtypes, _ in cuda_results.PROBES)
    for cell, error in results.items():
        op, condition, dtype = cuda_results.split_cell(cell)
        if error:
            assert "scaled_dot_product" in error, cell
        if "MATH" in condition or op.startswith(("nn.LSTM", "nn.GRU", "nn.RNN")):
            assert error is None, cell  # MATH and the CPU's RNNs have a double backward
    layer = (
        "nn.TransformerEncoderLayer (eval) | eval mode, dropout=0, default CUDA kernel"
    )
    assert (
        "_scaled_dot_product_flash_attention_for_cpu" in results[layer + " | float32"]
    )


def test_a_first_backward_that_raises_counts_as_raising():
    x = torch.ones(3, requires_grad=True)

    class FirstBackwardRaises(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("cudnn RNN backward can only be called in training mode")

    error = cuda_results.penalty_error(lambda: FirstBackwardRaises.apply(x), [x])
    assert (
        error == "RuntimeError: cudnn RNN backward can only be called in training mode"
    )


def test_write_keeps_the_attention_cost_and_labels_the_run(tmp_path):
    (tmp_path / "torch-2.11.0.json").write_text(
        json.dumps({"torch": "2.11.0", "attention_cost": {"rows": [1]}})
    )
    path = cuda_results.write(
        {"a | b | float32": None},
        device_name="NVIDIA H200",
        torch_build="2.11.0+cu130",
        source="nox -s matrix -- --device cuda",
        data_dir=tmp_path,
        now=datetime.datetime(2027, 1, 2, tzinfo=datetime.timezone.utc),
    )
    data = json.loads(path.read_text())
    assert path.name == "torch-2.11.0.json"
    assert data["measured"] == "2027-01-02"
    assert data["attention_cost"] == {"rows": [1]}
    assert data["device"] == "NVIDIA H200" and data["results"] == {
        "a | b | float32": None
    }


def test_main_refuses_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="must name an available CUDA device"):
        cuda_results.main(["--device", "cuda"])


def test_each_cuda_error_gets_its_fix():
    (data,) = cuda_results.load()
    trials = cuda_results.by_op(data)
    sdpa_fix = cuda_results.fix(
        cuda_results.SDPA, trials[cuda_results.SDPA], FIXES, NO_FIX
    )
    assert "replaced()" in sdpa_fix and "SDPBackend.MATH" in sdpa_fix
    lstm_fix = cuda_results.fix(
        "nn.LSTM (cuDNN)", trials["nn.LSTM (cuDNN)"], FIXES, NO_FIX
    )
    # The eval-mode fix extends the train-mode one: shown once.
    assert lstm_fix.count("cudnn.flags(enabled=False)") == 1 and "eval mode" in lstm_fix


def test_the_builtins_table_has_a_cuda_column_and_rows_for_cuda_kernels():
    (data,) = cuda_results.load()
    cpu = Measurement("2.13.0", "2026-12-04 16:34 UTC",
                      {"cdist | p = 2, 5 rows | float64": "NotImplementedError: x"})  # fmt: skip
    text = render({"2.13.0": cpu}, FIXES, {}, data)
    header = next(line for line in text.splitlines() if line.startswith("| Op"))
    assert header.endswith(
        "| CUDA (NVIDIA H200, torch 2.11.0+cu130, 2026-12-04) | Fix |"
    )
    cdist = next(line for line in text.splitlines() if line.startswith("| [`cdist`]"))
    assert "as on the CPU (torch 2.11.0: 540 OpInfo ops compared in float32)" in cdist
    lstm = next(line for line in text.splitlines() if "`nn.LSTM (cuDNN)`" in line)
    assert "not run (a CUDA kernel)" in lstm and "raised in 2 of 4 trials" in lstm
    assert "Passed on CUDA:" in text and "`nn.BatchNorm2d`" in text


def test_the_error_index_lists_the_cuda_messages_labelled():
    (data,) = cuda_results.load()
    sections = cuda_sections(data)
    titles = [section.splitlines()[0] for section in sections]
    assert (
        "## On CUDA: _scaled_dot_product_cudnn_attention has no double backward"
        in titles
    )
    assert (
        "## On CUDA: cudnn RNN backward can only be called in training mode" in titles
    )
    assert all("NVIDIA H200, torch 2.11.0+cu130, 2026-12-04" in s for s in sections)
    assert cuda_title("RuntimeError: x") == "On CUDA: x"


def test_a_cuda_cell_names_the_conditions_it_passed_and_raised_in():
    # A row whose CPU trials raise (need_weights=False) must not read as fixed on CUDA.
    passed = [("need_weights=True (the default)", "float32", None)]
    assert (
        cuda_results.summary(passed)
        == "passed: need_weights=True (the default) (float32)"
    )
    raised = [("eval mode", "float32", "RuntimeError: x")]
    assert (
        cuda_results.summary(raised) == "raised in 1 of 1 trials: eval mode (float32)"
    )
