"""docs/_ext/cuda_results.py: the CUDA probes' code path (on the CPU), the JSON, the rendering.

No GPU runs these tests: :func:`cuda_results.run` is run on the CPU (the same probes, the same
file), and the CUDA messages the rendering tests use are made up in the shape torch prints."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import cuda_results
import pytest
import torch
from builtins_table import NO_FIX, render
from error_index import cuda_sections, cuda_title
from versioned_results import Measurement

from double_backward.checker.model import FIXES

SDPA = cuda_results.SDPA
CPU = Measurement("2.13.0", "2026-12-04 16:34 UTC",
                  {"cdist | p = 2, 5 rows | float64": "NotImplementedError: x"})  # fmt: skip


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """The file ``nox -s matrix -- --device cuda`` writes, written by a run on the CPU."""
    path = cuda_results.run("cpu", tmp_path_factory.mktemp("cuda"))
    return json.loads(path.read_text(encoding="utf-8"))


def made_up_run() -> dict:
    """A file as a GPU run would write it; the messages are made up in torch's shape."""
    flash = "RuntimeError: derivative for aten::_scaled_dot_product_flash_attention_backward"
    cudnn = "RuntimeError: derivative for aten::_scaled_dot_product_cudnn_attention_backward"
    rnn_train = "NotImplementedError: the derivative for '_cudnn_rnn_backward' is not implemented."
    rnn_eval = "RuntimeError: cudnn RNN backward can only be called in training mode"
    results = {
        f"{SDPA} | sdpa_kernel(SDPBackend.FLASH_ATTENTION) | float16": flash,
        f"{SDPA} | sdpa_kernel(SDPBackend.FLASH_ATTENTION) | float32": "RuntimeError: No k",
        f"{SDPA} | default CUDA kernel | bfloat16": cudnn,
        f"{SDPA} | sdpa_kernel(SDPBackend.MATH) | float16": None,
        "nn.LSTM (cuDNN) | train mode | float32": rnn_train,
        "nn.LSTM (cuDNN) | eval mode | float32": rnn_eval,
        "nn.LSTM (cuDNN) | train mode, torch.backends.cudnn.flags(enabled=False) | float32": None,
        "nn.BatchNorm2d | train mode | float32": None,
    }
    stages = {cell: "second backward" for cell, error in results.items() if error}
    stages[f"{SDPA} | sdpa_kernel(SDPBackend.FLASH_ATTENTION) | float32"] = "forward"
    stages["nn.LSTM (cuDNN) | eval mode | float32"] = "first backward"
    env = {"device": "GPU X", "compute_capability": "9.0", "torch_build": "2.13.0+cu130",
           "cuda": "13.0", "cudnn": "91002"}  # fmt: skip
    return {"torch": "2.13.0", "torch_build": env["torch_build"], "device": env["device"],
            "environment": env, "measured": "2027-01-02", "source": "a run", "results": results,
            "stages": stages, "kernels": {f"{SDPA} | default CUDA kernel | bfloat16":
                                          "ScaledDotProductCudnnAttentionBackward0"}}  # fmt: skip


def test_the_committed_file_holds_no_trial_that_no_run_produced():
    (data,) = cuda_results.load()
    assert (data["device"], data["torch_build"], data["measured"]) == (
        "NVIDIA H200", "2.11.0+cu130", "2026-12-04",
    )  # fmt: skip
    # The probes never ran on a GPU: no cell, and a source a reader understands.
    assert data["results"] == {} and "stages" not in data
    assert "issue" not in data["source"] and "no trial is recorded" in data["source"]
    cost = {(row["dtype"], row["kernel"]): row for row in data["attention_cost"]["rows"]}
    assert cost[("bfloat16", "MATH")]["gradient_penalty_ms"] == 132


def test_the_prepared_run_writes_every_probe_on_the_cpu(cpu_run):
    # The code path of nox -s matrix -- --device cuda, on the CPU: on CUDA the same probes
    # meet the fused kernels instead.
    results = cpu_run["results"]
    assert len(results) == sum(len(dtypes) for _, _, dtypes, _ in cuda_results.PROBES)
    assert cpu_run["environment"]["torch_build"] == torch.__version__
    assert cpu_run["environment"]["cudnn"] == str(torch.backends.cudnn.version())
    assert cpu_run["source"].startswith("A run of the probes on cpu")
    for cell, error in results.items():
        op, condition, dtype = cuda_results.split_cell(cell)
        if error:
            assert "scaled_dot_product" in error, cell
            # The CPU has no efficient or cuDNN kernel: their forward refuses, and that is
            # recorded as such, not as a double-backward result.
            cpu_has_it = "EFFICIENT" not in condition and "CUDNN" not in condition
            stage = "second backward" if cpu_has_it else "forward"
            assert cpu_run["stages"][cell] == stage, cell
        if "MATH" in condition or op.startswith(("nn.LSTM", "nn.GRU", "nn.RNN")):
            assert error is None, cell  # MATH and the CPU's RNNs have a double backward
    # The kernel the default picked, as autograd recorded it: on the CPU, the CPU flash one.
    kernels = cuda_results.default_kernels(cpu_run)
    assert set(kernels) == {"float16", "bfloat16", "float32"}
    assert kernels["float32"] == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert "_scaled_dot_product_flash_attention_for_cpu" in results[
        "nn.TransformerEncoderLayer (eval) | eval mode, dropout=0, default CUDA kernel | float32"
    ]


def test_the_environment_names_what_chooses_the_kernel_on_a_faked_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "GPU X")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    env = cuda_results.environment("cuda")
    assert env["device"] == "GPU X" and env["compute_capability"] == "9.0"
    assert env["torch_build"] == torch.__version__
    assert env["cuda"] == str(torch.version.cuda)


def test_a_forward_that_raises_is_recorded_as_such_and_left_out_of_the_results():
    x = torch.ones(3, requires_grad=True)

    def refuses():
        raise RuntimeError("No available kernel. Aborting execution.")

    outcome = cuda_results.penalty_outcome(refuses, [x])
    assert outcome == {"error": "RuntimeError: No available kernel. Aborting execution.",
                       "stage": "forward", "kernel": None}  # fmt: skip
    data = made_up_run()
    refused = f"{SDPA} | sdpa_kernel(SDPBackend.FLASH_ATTENTION) | float32"
    assert cuda_results.refused_at_forward(data) == [refused]
    assert all(dtype != "float32" or "FLASH" not in condition
               for condition, dtype, _ in cuda_results.by_op(data)[SDPA])  # fmt: skip
    assert f"Refused at the forward, so not a double-backward result and not shown: {refused}" in (
        cuda_results.about_text(data)
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

    outcome = cuda_results.penalty_outcome(lambda: FirstBackwardRaises.apply(x), [x])
    assert outcome["stage"] == "first backward"
    assert outcome["error"] == (
        "RuntimeError: cudnn RNN backward can only be called in training mode"
    )
    assert outcome["kernel"] == "FirstBackwardRaisesBackward"


def test_write_keeps_the_attention_cost_and_labels_the_run(tmp_path):
    (tmp_path / "torch-2.11.0.json").write_text(
        json.dumps({"torch": "2.11.0", "attention_cost": {"rows": [1]}})
    )
    env = {**made_up_run()["environment"], "torch_build": "2.11.0+cu130"}
    path = cuda_results.write(
        {"a | b | float32": {"error": None, "stage": None, "kernel": "MmBackward0"}},
        environment=env, source="a run", data_dir=tmp_path,
        now=datetime.datetime(2027, 1, 2, tzinfo=datetime.timezone.utc),
    )  # fmt: skip
    data = json.loads(path.read_text())
    assert path.name == "torch-2.11.0.json"
    assert data["measured"] == "2027-01-02"
    assert data["attention_cost"] == {"rows": [1]}
    assert data["results"] == {"a | b | float32": None} and data["stages"] == {}
    assert data["kernels"] == {"a | b | float32": "MmBackward0"}
    assert cuda_results.label(data) == (
        "GPU X, torch 2.11.0+cu130, cuDNN 91002, compute capability 9.0, 2027-01-02"
    )


def test_main_refuses_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="must name an available CUDA device"):
        cuda_results.main(["--device", "cuda"])


def test_each_cuda_error_gets_its_fix():
    trials = cuda_results.by_op(made_up_run())
    sdpa_fix = cuda_results.fix(SDPA, trials[SDPA], FIXES, NO_FIX)
    assert "replaced()" in sdpa_fix and "SDPBackend.MATH" in sdpa_fix
    lstm_fix = cuda_results.fix("nn.LSTM (cuDNN)", trials["nn.LSTM (cuDNN)"], FIXES, NO_FIX)
    # The eval-mode fix extends the train-mode one: shown once.
    assert lstm_fix.count("cudnn.flags(enabled=False)") == 1 and "eval mode" in lstm_fix


def test_no_cuda_column_without_a_run():
    (committed,) = cuda_results.load()
    text = render({"2.13.0": CPU}, FIXES, {}, committed)
    header = next(line for line in text.splitlines() if line.startswith("| Op"))
    assert "CUDA" not in header
    assert "no run of the CUDA probes is committed" in text
    assert "not run (a CUDA kernel)" not in text and "Passed on CUDA" not in text


def test_the_builtins_table_has_a_cuda_column_from_a_run():
    text = render({"2.13.0": CPU}, FIXES, {}, made_up_run())
    header = next(line for line in text.splitlines() if line.startswith("| Op"))
    assert header.endswith(
        "| CUDA (GPU X, torch 2.13.0+cu130, cuDNN 91002, compute capability 9.0, "
        "2027-01-02) | Fix |"
    )
    cdist = next(line for line in text.splitlines() if line.startswith("| [`cdist`]"))
    assert "not probed on CUDA" in cdist
    lstm = next(line for line in text.splitlines() if "`nn.LSTM (cuDNN)`" in line)
    assert "not run (a CUDA kernel)" in lstm and "raised in 2 of 3 trials" in lstm
    assert "Passed on CUDA: `nn.BatchNorm2d`." in text


def test_an_unprobed_op_names_the_release_it_was_compared_on():
    data = {**made_up_run(), "about": {"opinfo_ops_compared_with_the_cpu": 540,
                                       "opinfo_dtype": "float32"}}  # fmt: skip
    assert cuda_results.cpu_op_cell(data) == (
        "as on the CPU with torch 2.13.0 (the CUDA run's release, not a CPU column's): "
        "540 OpInfo ops compared in float32"
    )


def test_the_error_index_lists_the_cuda_messages_labelled():
    sections = cuda_sections(made_up_run())
    titles = [section.splitlines()[0] for section in sections]
    assert "## On CUDA: _scaled_dot_product_cudnn_attention has no double backward" in titles
    assert "## On CUDA: cudnn RNN backward can only be called in training mode" in titles
    assert not any("No k" in section for section in sections)  # refused at the forward
    assert all("GPU X, torch 2.13.0+cu130" in s for s in sections)
    assert cuda_title("RuntimeError: x") == "On CUDA: x"
    (committed,) = cuda_results.load()
    assert cuda_sections(committed) == []


def test_a_cuda_message_the_build_raised_itself_keeps_one_entry():
    # The fused kernels' messages are raised at build time on the meta device; a GPU run
    # that records one adds no second section for it.
    data = made_up_run()
    cudnn = data["results"][f"{SDPA} | default CUDA kernel | bfloat16"]
    titles = [s.splitlines()[0] for s in cuda_sections(data, raised_here={cudnn})]
    assert "## On CUDA: _scaled_dot_product_cudnn_attention has no double backward" not in titles
    assert "## On CUDA: cudnn RNN backward can only be called in training mode" in titles


def test_a_cuda_cell_names_the_conditions_it_passed_and_raised_in():
    # A row whose CPU trials raise (need_weights=False) must not read as fixed on CUDA.
    passed = [("need_weights=True (the default)", "float32", None)]
    assert cuda_results.summary(passed) == "passed: need_weights=True (the default) (float32)"
    raised = [("eval mode", "float32", "RuntimeError: x")]
    assert cuda_results.summary(raised) == "raised in 1 of 1 trials: eval mode (float32)"


# The first cell of the page "On the GPU": what it prints of the newest run of the probes.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU_PAGE = EXAMPLES / "builtins_and_models" / "plot_21_on_the_gpu.py"


def _gpu_page_prints(runs: list[dict], monkeypatch, capsys) -> str:
    import double_backward.costs

    first_cell = GPU_PAGE.read_text().split("\n# %%\n")[1]
    monkeypatch.setattr(double_backward.costs, "load_cuda_measurements", lambda: runs)
    exec(compile(first_cell, str(GPU_PAGE), "exec"), {})  # noqa: S102 - the page's own code
    return capsys.readouterr().out


@pytest.mark.parametrize("run", ["the prepared run on the cpu", "a gpu's run, made up"])
def test_the_gpu_page_shows_a_committed_run_cell_by_cell(run, cpu_run, monkeypatch, capsys):
    # A file the prepared run writes replaces the H200 file's empty results: the page must
    # then show each probe as the run recorded it, or its build fails when a GPU run lands.
    data = cpu_run if run.startswith("the prepared") else made_up_run()
    (committed,) = cuda_results.load()
    printed = _gpu_page_prints([committed, data], monkeypatch, capsys)
    env = data["environment"]
    assert f"measured on {data['device']} (compute capability {env['compute_capability']})" in (
        printed
    )
    assert "No GPU run of the probes" not in printed
    for cell, error in data["results"].items():
        op, condition, dtype = cuda_results.split_cell(cell)
        assert f"\n{op}\n" in printed, op
        assert f"{condition} ({dtype})" in printed, cell
        if error and data["stages"][cell] == "forward":
            assert f"refused at the forward (not a double-backward result): {error}" in printed
        elif error:
            assert f"  {error}\n" in printed, cell
    for dtype, kernel in cuda_results.default_kernels(data).items():
        assert f"  {dtype}: {kernel}\n" in printed


def test_without_a_run_of_the_probes_the_gpu_page_says_so(monkeypatch, capsys):
    printed = _gpu_page_prints(cuda_results.load(), monkeypatch, capsys)
    assert printed.startswith("No GPU run of the probes is recorded yet.\n")
    assert "measured on" not in printed
