"""The CUDA kernels without a double backward: probes, their committed results, and rendering.

A build has no GPU, so nothing here runs a CUDA kernel at build time. The results are committed
JSON, ``src/double_backward/measurements/cuda/torch-<release>.json`` (shipped with the
package, which the "On the GPU" page reads): the GPU, its compute capability, the torch build
and its CUDA and cuDNN versions, the date, where the figures come from (``source``), each trial
as a cell (``"op | condition | dtype"`` -> the first line of its error, ``None`` where the
gradient penalty ran; ``stages``: where it raised; ``kernels``: the output's autograd node, which
names the kernel that ran), and the replacement attention's measured cost
(``attention_cost``). Only a run of :func:`run` writes cells; a file without a run holds none,
and the pages then show no CUDA trial.

``nox -s matrix -- --device cuda`` runs this module as a script on a machine with a GPU:
:data:`PROBES` under a gradient penalty on ``cuda``, written with :func:`write` (keeping the
committed ``attention_cost`` of the same release, which ``nox -s bench_functions -- --device
cuda`` measures). The built-ins table (:mod:`builtins_table`), the error index
(:mod:`error_index`) and the page "On the GPU"
(``examples/builtins_and_models/plot_21_on_the_gpu.py``, which reads the JSON
itself) show the committed files.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# In the package, so that the "On the GPU" page reads it from a download too.
DATA_DIR = Path(__file__).parents[2] / "src" / "double_backward" / "measurements" / "cuda"
SDPA = "nn.functional.scaled_dot_product_attention"
BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
HALF_AND_SINGLE = ("float16", "bfloat16", "float32")
RNNS = ("nn.LSTM", "nn.GRU", "nn.RNN")


# -- probes ------------------------------------------------------------------------------------
def _leaf(*shape, dtype, device, seed=0):
    import torch

    # Drawn on the CPU, then moved: the same inputs on every device.
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=generator, dtype=torch.float32)
    return x.to(device=device, dtype=dtype).requires_grad_()


def _sdpa(backend: str | None, is_causal: bool = False):
    def make(dtype, device):
        import contextlib

        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (
            _leaf(2, 2, 64, 64, dtype=dtype, device=device, seed=s) for s in range(3)
        )

        def call():
            chosen = sdpa_kernel(getattr(SDPBackend, backend)) if backend else None
            with chosen or contextlib.nullcontext():
                return torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=is_causal
                )

        return call, [q, k, v]

    return make


def _module(build: str, shape: tuple[int, ...], train: bool, cudnn: bool = True):
    def make(dtype, device):
        import contextlib

        import torch

        torch.manual_seed(0)
        module = eval(build, {"nn": torch.nn})  # noqa: S307 - our own constant strings
        module = module.to(device=device, dtype=dtype).train(train)
        x = _leaf(*shape, dtype=dtype, device=device)

        def call():
            off = None if cudnn else torch.backends.cudnn.flags(enabled=False)
            with off or contextlib.nullcontext():
                out = module(x, x, x)[0] if "Multihead" in build else module(x)
            return out[0] if isinstance(out, tuple) else out

        return call, [x, *module.parameters()]

    return make


def _function(expression: str, shape: tuple[int, ...]):
    def make(dtype, device):
        import torch

        x = _leaf(*shape, dtype=dtype, device=device)
        return lambda: eval(expression, {"F": torch.nn.functional, "x": x}), [x]  # noqa: S307

    return make


ENCODER_LAYER = "nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)"

#: (op, condition, dtypes, make(dtype, device) -> (call, leaves)): the kernels issue 28 found
#: to differ from the CPU, and those it found to work, as ``nox -s matrix -- --device cuda``
#: runs them.
PROBES: list[tuple[str, str, tuple[str, ...], Callable]] = [
    *[(SDPA, f"sdpa_kernel(SDPBackend.{backend})" + (", is_causal=True" if causal else ""),
       HALF_AND_SINGLE, _sdpa(backend, causal))
      for backend in BACKENDS for causal in (False, True)],
    (SDPA, "default CUDA kernel", HALF_AND_SINGLE, _sdpa(None)),
    (SDPA, "sdpa_kernel(SDPBackend.MATH)", HALF_AND_SINGLE, _sdpa("MATH")),
    *[(f"nn.TransformerEncoderLayer ({mode})",
       f"{mode} mode, dropout=0, default CUDA kernel", HALF_AND_SINGLE,
       _module(ENCODER_LAYER, (2, 16, 16), mode == "train"))
      for mode in ("train", "eval")],
    *[(f"{rnn} (cuDNN)", f"{mode} mode" + ("" if cudnn else
       ", torch.backends.cudnn.flags(enabled=False)"), ("float32",),
       _module(f"{rnn}(8, 16, batch_first=True)", (2, 5, 8), mode == "train", cudnn))
      for rnn in RNNS for cudnn in (True, False) for mode in ("train", "eval")],
    *[("nn.BatchNorm2d", f"{mode} mode", ("float32",),
       _module("nn.BatchNorm2d(3)", (2, 3, 5, 5), mode == "train"))
      for mode in ("train", "eval")],
    ("nn.GroupNorm", "train mode", ("float32",), _module("nn.GroupNorm(2, 4)", (2, 4, 5), True)),
    ("nn.LayerNorm", "train mode", ("float32",), _module("nn.LayerNorm(8)", (2, 8), True)),
    ("nn.Conv2d", "train mode", ("float32", "float16"),
     _module("nn.Conv2d(3, 4, 3)", (2, 3, 8, 8), True)),
    ("nn.ConvTranspose2d", "train mode", ("float32", "float16"),
     _module("nn.ConvTranspose2d(3, 4, 3)", (2, 3, 8, 8), True)),
    ("nn.MultiheadAttention", "need_weights=True (the default)", ("float32",),
     _module("nn.MultiheadAttention(16, 2, batch_first=True)", (2, 6, 16), True)),
    ("nn.functional.max_pool2d", "kernel 2", ("float32",),
     _function("F.max_pool2d(x, 2)", (2, 3, 8, 8))),
    ("nn.functional.interpolate", "bilinear, scale 2", ("float32",),
     _function("F.interpolate(x, scale_factor=2, mode='bilinear')", (2, 3, 8, 8))),
    ("nn.functional.rms_norm", "last dimension", ("float32",),
     _function("F.rms_norm(x, (8,))", (2, 8))),
]  # fmt: skip


def first_line(error: BaseException) -> str:
    """``Type: first line of the message``, as the built-ins table shows it."""
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0].rstrip(',')}"


def penalty_outcome(call: Callable[[], object], wrt: list) -> dict[str, str | None]:
    """What a gradient penalty through ``call`` did: ``error`` (the first line of what it
    raised, ``None`` where it ran), ``stage`` (where it raised: ``"forward"``, ``"first
    backward"`` or ``"second backward"``; ``None`` where it ran) and ``kernel`` (the autograd
    node of the output, which names the kernel that ran: ``ScaledDotProductCudnnAttention
    Backward0``; ``None`` where the forward raised).

    Unlike the CPU scan, an error of the first backward counts too: cuDNN's RNN in eval mode
    refuses even that, and a penalty then fails at its first step. An error at the forward is
    no double-backward result: a kernel that takes no such dtype, say.
    """
    import torch

    outcome: dict[str, str | None] = {"error": None, "stage": "forward", "kernel": None}
    try:
        out = call()
        outcome["kernel"] = out.grad_fn.name() if out.grad_fn is not None else None
        outcome["stage"] = "first backward"
        # Fixed weights drawn on the CPU, then moved: the loss is not symmetric.
        generator = torch.Generator().manual_seed(0)
        weights = torch.randn(out.shape, generator=generator).to(out)
        loss = (weights * out * out).sum()
        grads = torch.autograd.grad(loss, wrt, create_graph=True, allow_unused=True)
        penalty = sum((g * g).sum() for g in grads if g is not None)
        outcome["stage"] = "second backward"
        torch.autograd.grad(penalty, wrt, allow_unused=True)
    except Exception as error:  # noqa: BLE001 - the error is the measurement
        outcome["error"] = first_line(error)
        return outcome
    outcome["stage"] = None
    return outcome


def penalty_error(call: Callable[[], object], wrt: list) -> str | None:
    """The first line of what a gradient penalty raises, or ``None`` where it runs."""
    return penalty_outcome(call, wrt)["error"]


def measure(device: str = "cuda") -> dict[str, dict[str, str | None]]:
    """Every probe on ``device``: cell -> :func:`penalty_outcome`."""
    import torch

    outcomes = {}
    for op, condition, dtypes, make in PROBES:
        for dtype in dtypes:
            call, wrt = make(getattr(torch, dtype), device)
            outcomes[f"{op} | {condition} | {dtype}"] = penalty_outcome(call, wrt)
    return outcomes


def environment(device: str) -> dict[str, str]:
    """What decides which kernels run: the GPU and its generation (compute capability), the
    torch build, and the CUDA and cuDNN versions torch was built with."""
    import torch

    cuda = torch.device(device).type == "cuda"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    major, minor = torch.cuda.get_device_capability(device) if cuda else (None, None)
    return {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "compute_capability": f"{major}.{minor}" if cuda else "none (not a GPU)",
        "torch_build": torch.__version__,
        "cuda": str(torch.version.cuda),
        "cudnn": str(cudnn),
    }


def write(
    outcomes: dict[str, dict[str, str | None]],
    *,
    environment: dict[str, str],
    source: str,
    data_dir: Path = DATA_DIR,
    now: datetime.datetime | None = None,
) -> Path:
    """``outcomes`` (from :func:`measure`) as ``<data_dir>/torch-<release>.json``, keeping
    that file's ``attention_cost`` (measured by ``nox -s bench_functions -- --device cuda``).
    Every cell is a run's, word for word: ``results`` (the error, ``None`` where the penalty
    ran), ``stages`` (where each error was raised) and ``kernels`` (the output's autograd
    node)."""
    release = environment["torch_build"].split("+")[0]
    path = data_dir / f"torch-{release}.json"
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    now = now or datetime.datetime.now(datetime.timezone.utc)
    data = {
        "torch": release,
        "torch_build": environment["torch_build"],
        "device": environment["device"],
        "environment": environment,
        "measured": now.strftime("%Y-%m-%d"),
        "source": source,
        "results": {cell: o["error"] for cell, o in outcomes.items()},
        "stages": {cell: o["stage"] for cell, o in outcomes.items() if o["error"]},
        "kernels": {cell: o["kernel"] for cell, o in outcomes.items()},
        "about": {"probes": len(outcomes)},
    }
    if "attention_cost" in kept:
        data["attention_cost"] = kept["attention_cost"]
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def run(device: str, data_dir: Path = DATA_DIR) -> Path:
    """Measure every probe on ``device`` and write the file: what ``nox -s matrix --
    --device cuda`` does (the tests run it on the CPU, into a temporary folder)."""
    env = environment(device)
    outcomes = measure(device)
    source = (
        f"A run of the probes on {env['device']} (compute capability "
        f"{env['compute_capability']}) with torch {env['torch_build']}, CUDA {env['cuda']}, "
        f"cuDNN {env['cudnn']}: every message is the first line of what that run raised."
    )
    return write(outcomes, environment=env, source=source, data_dir=data_dir)


def load(data_dir: Path = DATA_DIR) -> list[dict[str, Any]]:
    """The committed CUDA files, oldest torch release first."""

    def release(data: dict) -> tuple[int, ...]:
        return tuple(int(part) for part in data["torch"].split("."))

    files = sorted(data_dir.glob("torch-*.json"))
    return sorted(
        (json.loads(f.read_text(encoding="utf-8")) for f in files), key=release
    )


# -- rendering ---------------------------------------------------------------------------------
def label(data: dict[str, Any]) -> str:
    """Where a file's figures come from: ``NVIDIA H200, torch 2.13.0+cu130, 2026-12-04``,
    with the cuDNN version and compute capability where the run recorded them."""
    env = data.get("environment", {})
    versions = (
        f", cuDNN {env['cudnn']}, compute capability {env['compute_capability']}"
        if env else ""
    )
    return f"{data['device']}, torch {data['torch_build']}{versions}, {data['measured']}"


def refused_at_forward(data: dict[str, Any]) -> list[str]:
    """The cells whose forward raised: no double-backward result (a kernel that takes no
    such dtype), left out of :func:`by_op`."""
    stages = data.get("stages", {})
    return [cell for cell in data["results"] if stages.get(cell) == "forward"]


def default_kernels(data: dict[str, Any]) -> dict[str, str]:
    """dtype -> the autograd node of SDPA's output under the default kernel, as recorded."""
    chosen = {}
    for cell, kernel in data.get("kernels", {}).items():
        op, condition, dtype = split_cell(cell)
        if op == SDPA and condition == "default CUDA kernel" and kernel:
            chosen[dtype] = kernel
    return chosen


def split_cell(cell: str) -> tuple[str, str, str]:
    op, condition, dtype = cell.split(" | ")
    return op, condition, dtype


def by_op(data: dict[str, Any]) -> dict[str, list[tuple[str, str, str | None]]]:
    """op -> [(condition, dtype, error)] in the file's order."""
    ops: dict[str, list[tuple[str, str, str | None]]] = {}
    refused = set(refused_at_forward(data))
    for cell, error in data["results"].items():
        if cell in refused:
            continue
        op, condition, dtype = split_cell(cell)
        ops.setdefault(op, []).append((condition, dtype, error))
    return ops


def summary(trials: list[tuple[str, str, str | None]]) -> str:
    """An op's CUDA cell: how many of its trials raised, and where."""
    raised = sum(1 for *_, error in trials if error)
    passed = _conditions(trials, False)
    if not raised:
        return f"passed: {passed}"
    text = f"raised in {raised} of {len(trials)} trials: {_conditions(trials, True)}"
    return text + (f"; passed: {passed}" if passed != "none" else "")


def _conditions(trials, raised: bool) -> str:
    dtypes: dict[str, list[str]] = {}
    for condition, dtype, error in trials:
        if bool(error) == raised:
            dtypes.setdefault(condition, []).append(dtype)
    return "; ".join(f"{c} ({', '.join(d)})" for c, d in dtypes.items()) or "none"


def fix(op: str, trials, fixes: dict[str, str], no_fix: str) -> str:
    """The fix of each error the op raised on CUDA (the ATen operator an error names, or the
    message itself where it names none), once; a fix that another extends is left out."""
    import re

    shown: list[str] = []
    for error in sorted({error for *_, error in trials if error}):
        match = re.search(r"aten::(\w+)|derivative for '(\w+)'", error)
        key = (match.group(1) or match.group(2)) if match else error.split(": ")[-1]
        found = fixes.get(key.removesuffix("_backward")) or fixes.get(op) or no_fix
        if found not in shown:
            shown.append(found)
    kept = [f for f in shown if not any(o != f and o.startswith(f) for o in shown)]
    return " Otherwise: ".join(kept)


def about_text(data: dict[str, Any]) -> str:
    """Where the CUDA figures come from, for the text above a table."""
    if not data["results"]:
        return (
            "On CUDA: no run of the CUDA probes is committed, so no CUDA result is shown; "
            "`nox -s matrix -- --device cuda` on a machine with a GPU writes them. The "
            f"committed file (torch {data['torch']}): {data['source']}"
        )
    about = data.get("about", {})
    compared = (
        f" Across {about['opinfo_ops_compared_with_the_cpu']} OpInfo operators in "
        f"{about['opinfo_dtype']}, {about['opinfo_ops_differing_from_the_cpu']} others "
        f"differed between the CPU and CUDA with torch {data['torch']}."
        if "opinfo_ops_compared_with_the_cpu" in about
        else ""
    )
    refused = refused_at_forward(data)
    refusals = (
        f" Refused at the forward, so not a double-backward result and not shown: "
        f"{'; '.join(refused)}." if refused else ""
    )
    return (
        f"On CUDA: {label(data)}. Source: {data['source']}{compared}{refusals} Shown as "
        "that run recorded it: a build has no GPU and re-runs none of it."
    )


def cpu_op_cell(data: dict[str, Any]) -> str:
    """The CUDA cell of an op the CUDA run did not probe."""
    about = data.get("about", {})
    if "opinfo_ops_compared_with_the_cpu" in about:
        # Compared with the CPU of the same torch, which need not be a CPU column's release.
        return (
            f"as on the CPU with torch {data['torch']} (the CUDA run's release, not a CPU "
            f"column's): {about['opinfo_ops_compared_with_the_cpu']} OpInfo ops compared in "
            f"{about['opinfo_dtype']}"
        )
    return "not probed on CUDA"


def error_entries(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(message, the ops and conditions that raised it) for each CUDA error."""
    messages: dict[str, list[str]] = {}
    for op, trials in by_op(data).items():
        for condition, dtype, error in trials:
            if error:
                messages.setdefault(error, []).append(f"`{op}`, {condition} ({dtype})")
    return [(message, "; ".join(where)) for message, where in messages.items()]


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        description="Run the CUDA probes and write their JSON."
    )
    parser.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    args = parser.parse_args(argv)
    import torch

    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise SystemExit(
            f"cuda_results: --device must name an available CUDA device, got {args.device!r} "
            f"(CUDA available: {torch.cuda.is_available()})"
        )
    path = run(str(device))
    data = json.loads(path.read_text(encoding="utf-8"))
    raised = sum(1 for error in data["results"].values() if error)
    print(f"{raised} of {len(data['results'])} CUDA trials raised: {path}")
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
