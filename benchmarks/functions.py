"""Time every Function of the package against its native op, side by side, and count memory.

Run by ``nox -s bench_functions`` (``-- --quick`` for a short trial run). For each case of
:data:`double_backward.costs.CASES`, at 1e3 to 1e7 float32 elements on one thread:

- ``forward_backward``: forward, then the gradient (one training step);
- ``double_backward``: forward, a ``create_graph=True`` backward, and the backward of that;
- ``penalty_double_backward``: the same with a ``grad_out`` that requires grad, the second
  backward taken with respect to x and grad_out, as in a gradient penalty or a composed loss
  (:func:`double_backward.costs.penalty_double_backward`);

each timed (in this process's CPU time, on the CPU) as paired rounds: in every round the
custom Function and its native op run back to back (which goes first alternates), and the
figure is the median of the per-round ratios custom / native. Load from other users of a
shared machine hits both members of a pair alike; the load average is recorded at the start
and the end. Then, exactly: the bytes saved for
backward (:func:`double_backward.costs.saved_tensors`) and the peak memory of one double
backward (:func:`double_backward.costs.peak_memory`, from torch.profiler's allocation events).

It prints a table, the targets and whether each is met, and writes JSON (by default the
package's ``measurements/functions.json``, which the "What it costs" page plots; ``--quick``
writes nothing unless ``--output`` is given). Where CUDA is available it also runs on the GPU.

It also measures :func:`double_backward.ops.scaled_dot_product_attention` against torch's MATH
backend at B=2, H=8, L=S=1024, d=64 (float32, one thread, CPU): bytes kept beyond the inputs and
the output, peak memory, and forward + backward and gradient-penalty time in paired rounds,
against the targets; written to ``measurements/attention.json`` (``--part attention`` for this
alone, ``--part functions`` to skip it).

``--device cuda`` (``nox -s bench_functions -- --device cuda``) measures instead issue 28's GPU
targets, side by side: ops against MATH and the default kernel at B=4, H=16, L=4096, d=64 in
bfloat16 (forward + backward and gradient-penalty wall time, the penalty's peak memory), and
the output error in bfloat16 and float16 against float64 from the float32 inputs; written to
``--attention-output`` when given. ``--device cpu --quick`` runs that code path on the CPU.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from double_backward import costs, ops
from double_backward.costs import (
    Case,
    double_backward,
    forward_backward,
    peak_memory,
    penalty_double_backward,
    saved_tensors,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "src" / "double_backward" / "measurements" / "functions.json"
SIZES = (10**3, 10**4, 10**5, 10**6, 10**7)
TARGET_SIZE = 10**6
KINDS = ("forward_backward", "double_backward", "penalty_double_backward")
CASES = list(costs.CASES)  # --only narrows it


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(
    step: Callable[[], object], calls: int, device: torch.device
) -> float:
    """Seconds per call of ``step``: this process's CPU time on the CPU, wall time on a GPU.

    On one thread, CPU time does not count the time other users' processes hold the core,
    which wall time would; a GPU's work is not this process's CPU time, so it gets wall time.
    """
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    synchronize(device)
    start = clock()
    for _ in range(calls):
        step()
    synchronize(device)
    return (clock() - start) / calls


def steps(case: Case, kind: str, tensors: tuple[torch.Tensor, ...]):
    x, grad_out, grad_grad_x = tensors
    if kind == "forward_backward":
        return (
            lambda: forward_backward(case.custom, x, grad_out),
            lambda: forward_backward(case.native, x, grad_out),
        )
    step = double_backward if kind == "double_backward" else penalty_double_backward
    return (
        lambda: step(case.custom, x, grad_out, grad_grad_x),
        lambda: step(case.native, x, grad_out, grad_grad_x),
    )


def measure_times(
    device: torch.device, sizes, rounds: int, budget: float
) -> dict[tuple[str, int, str], dict[str, float]]:
    """Median custom/native ratio over paired, interleaved rounds, for each case, size, kind."""
    generator = torch.Generator().manual_seed(0)
    inputs = {
        size: tuple(torch.randn(size, generator=generator).to(device) for _ in range(3))
        for size in sizes
    }
    plan = []
    for case in CASES:
        for size in sizes:
            for kind in KINDS:
                custom, native = steps(case, kind, inputs[size])
                custom(), native()  # warm-up
                one_call = max(
                    seconds_per_call(custom, 1, device),
                    seconds_per_call(native, 1, device),
                )
                calls = max(1, math.ceil(budget / max(one_call, 1e-7)))
                plan.append(((case.name, size, kind), custom, native, calls))
    results = paired_rounds(plan, rounds, device)
    for key, *_, calls in plan:
        results[key]["calls_per_timing"] = calls
    return results


def paired_rounds(plan, rounds: int, device: torch.device) -> dict:
    """Time each ``(key, custom, native, calls)`` of ``plan`` side by side, ``rounds`` times,
    alternating which goes first; per key, the median ratio custom / native, its quartiles
    and the median seconds per call of each."""
    samples = {key: ([], [], []) for key, *_ in plan}
    gc.collect()
    gc.disable()
    try:
        for round_index in range(rounds):
            for key, custom, native, calls in plan:
                if round_index % 2 == 0:
                    custom_time = seconds_per_call(custom, calls, device)
                    native_time = seconds_per_call(native, calls, device)
                else:
                    native_time = seconds_per_call(native, calls, device)
                    custom_time = seconds_per_call(custom, calls, device)
                ratios, customs, natives = samples[key]
                ratios.append(custom_time / native_time)
                customs.append(custom_time)
                natives.append(native_time)
            print(f"  round {round_index + 1}/{rounds} done", file=sys.stderr)
    finally:
        gc.enable()
    results = {}
    for key, (ratios, customs, natives) in samples.items():
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        results[key] = {
            "ratio": statistics.median(ratios),
            "ratio_q1": quartiles[0],
            "ratio_q3": quartiles[-1],
            "custom_seconds": statistics.median(customs),
            "native_seconds": statistics.median(natives),
        }
    return results


def measure_memory(device: torch.device, sizes) -> list[dict]:
    rows = []
    for case in CASES:
        for size in sizes:
            x, grad_out, grad_grad_x = (
                torch.randn(size, device=device) for _ in range(3)
            )
            row = {"case": case.name, "size": size}
            for side, fn in (("custom", case.custom), ("native", case.native)):
                row[f"{side}_peak_bytes"] = peak_memory(
                    lambda fn=fn, x=x, g=grad_out, gg=grad_grad_x: double_backward(
                        fn, x, g, gg
                    ),
                    device,
                )
            rows.append(row)
    return rows


def saved_rows(size: int) -> list[dict]:
    x = torch.randn(size)
    rows = []
    for case in CASES:
        row = {"case": case.name, "size": size}
        for side, fn in (("custom", case.custom), ("native", case.native)):
            report = saved_tensors(fn, x)
            row[side] = {
                "saved": [[s.role, s.nbytes] for s in report.forward],
                "extra_tensors": len(report.extra),
                "extra_bytes": report.extra_bytes,
                "new_in_backward": len(report.new_in_backward),
                "new_in_backward_bytes": report.new_in_backward_bytes,
            }
        rows.append(row)
    return rows


def targets(times: dict, saved: list[dict]) -> list[dict]:
    extra = {row["case"]: row["custom"]["extra_tensors"] for row in saved}
    rows = []
    for case in CASES:
        if case.time_target is None:
            continue
        ratio = times[(case.name, TARGET_SIZE, "double_backward")]["ratio"]
        penalty = times[(case.name, TARGET_SIZE, "penalty_double_backward")]["ratio"]
        rows.append({
            "case": case.name,
            "time_ratio": ratio,
            "time_target": case.time_target,
            "time_met": ratio <= case.time_target,
            # The same target, with a grad_out that requires grad (a penalty's case).
            "penalty_time_ratio": penalty,
            "penalty_time_met": penalty <= case.time_target,
            "extra_saved": extra[case.name],
            "extra_saved_target": case.extra_saved_target,
            "extra_saved_met": extra[case.name] == case.extra_saved_target,
        })  # fmt: skip
    return rows


def print_tables(device: str, sizes, times: dict, memory: list[dict]) -> None:
    name_width = max(len(case.name) for case in CASES) + 2
    for kind in KINDS:
        print(f"\n{device}: {kind.replace('_', ' ')} time, custom / native "
              "(median of paired rounds)")  # fmt: skip
        print("case".ljust(name_width) + "native".ljust(12)
              + "".join(f"{size:>9.0e}" for size in sizes))  # fmt: skip
        for case in CASES:
            cells = "".join(
                f"{times[(case.name, size, kind)]['ratio']:>9.2f}" for size in sizes
            )
            print(case.name.ljust(name_width) + case.native_name.ljust(12) + cells)
    size = max(sizes)
    print(f"\n{device}: peak memory of one double backward at {size:.0e} elements, "
          "bytes per element, custom / native")  # fmt: skip
    for row in memory:
        if row["size"] == size:
            print(row["case"].ljust(name_width)
                  + f"{row['custom_peak_bytes'] / size:>8.1f} / "
                  f"{row['native_peak_bytes'] / size:.1f}")  # fmt: skip


def print_saved(saved: list[dict]) -> None:
    name_width = max(len(case.name) for case in CASES) + 2
    print("\nsaved for backward, bytes per element (custom | native); "
          "'extra' = neither the input nor the output")  # fmt: skip
    for row in saved:
        size, custom, native = row["size"], row["custom"], row["native"]
        print(row["case"].ljust(name_width)
              + f"extra {custom['extra_tensors']} tensors, "
              f"{custom['extra_bytes'] / size:4.1f} B/elt; new in create_graph backward "
              f"{custom['new_in_backward_bytes'] / size:4.1f} B/elt | native extra "
              f"{native['extra_bytes'] / size:4.1f}, new "
              f"{native['new_in_backward_bytes'] / size:4.1f}")  # fmt: skip


def print_targets(rows: list[dict]) -> None:
    print(f"\ntargets: double backward at {TARGET_SIZE:.0e} float32 elements, 1 thread, "
          "custom / native; extra saved tensors")  # fmt: skip
    for row in rows:
        time_mark = "met" if row["time_met"] else "MISSED"
        saved_mark = "met" if row["extra_saved_met"] else "MISSED"
        penalty_mark = "met" if row["penalty_time_met"] else "MISSED"
        print(
            f"  {row['case']:<24} time {row['time_ratio']:.2f} (target <= "
            f"{row['time_target']:.2f}) {time_mark:<7} grad_out requiring grad "
            f"{row['penalty_time_ratio']:.2f} {penalty_mark:<7} extra saved "
            f"{row['extra_saved']} (target {row['extra_saved_target']}) {saved_mark}"
        )


# -- Attention: double_backward.ops against torch's MATH backend ---------------------------

#: The issue's target shape: (batch, heads, length, features), float32, one thread.
ATTENTION_SHAPE = (2, 8, 1024, 64)
QUICK_ATTENTION_SHAPE = (2, 8, 256, 64)
ATTENTION_KINDS = ("forward_backward", "gradient_penalty")
#: Saved bytes beyond the inputs and the output, custom / native; time, custom / native.
ATTENTION_TARGETS = {
    "extra_saved": 0.01,
    "forward_backward": 1.3,
    "gradient_penalty": 1.5,
}
DEFAULT_ATTENTION_OUTPUT = DEFAULT_OUTPUT.with_name("attention.json")


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's own attention with its MATH backend, the one with a double backward."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


ATTENTION_SIDES = (
    ("custom", "double_backward.ops.scaled_dot_product_attention",
     ops.scaled_dot_product_attention),
    ("native", "F.scaled_dot_product_attention, SDPBackend.MATH", math_attention),
)  # fmt: skip


def attention_step(fn, kind: str, q, k, v, grad_out) -> Callable[[], object]:
    """One training step (forward_backward) or one gradient penalty, w.r.t. q, k and v.

    The gradient penalty: forward, the gradients with create_graph=True, the sum of their
    squares, and its gradient (the second backward), as WGAN-GP or R1 run it.
    """

    def forward_backward():
        inputs = [t.detach().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(fn(*inputs), inputs, grad_out)

    def gradient_penalty():
        inputs = [t.detach().requires_grad_() for t in (q, k, v)]
        grads = torch.autograd.grad(fn(*inputs), inputs, grad_out, create_graph=True)
        penalty = sum(grad.square().sum() for grad in grads)
        return torch.autograd.grad(penalty, inputs)

    return forward_backward if kind == "forward_backward" else gradient_penalty


def attention_saved(fn, q, k, v) -> dict:
    """What fn saves, with q, k and v all counted as the input (views of one stacked tensor)."""
    report = saved_tensors(lambda qkv: fn(*qkv.unbind(0)), torch.stack((q, k, v)))
    return {
        "saved": [
            [saved.role, list(saved.shape), saved.nbytes] for saved in report.forward
        ],
        "extra_bytes": report.extra_bytes,
        "new_in_backward_bytes": report.new_in_backward_bytes,
    }


def measure_attention(shape, rounds: int) -> dict:
    """Saved bytes, peak memory and paired-round time ratios, ops against MATH, on the CPU."""
    batch, heads, length, features = shape
    generator = torch.Generator().manual_seed(0)
    q, k, v, grad_out = (
        torch.randn(batch, heads, length, features, generator=generator)
        for _ in range(4)
    )
    saved = {side: attention_saved(fn, q, k, v) for side, _, fn in ATTENTION_SIDES}
    peak = {
        kind: {
            side: peak_memory(attention_step(fn, kind, q, k, v, grad_out))
            for side, _, fn in ATTENTION_SIDES
        }
        for kind in ATTENTION_KINDS
    }
    times = {}
    for kind in ATTENTION_KINDS:
        custom, native = (
            attention_step(fn, kind, q, k, v, grad_out) for _, _, fn in ATTENTION_SIDES
        )
        custom(), native()  # warm-up
        ratios, customs, natives = [], [], []
        gc.collect()
        gc.disable()
        try:
            for round_index in range(rounds):
                pair = (custom, native) if round_index % 2 == 0 else (native, custom)
                first, second = (seconds_per_call(step, 1, torch.device("cpu"))
                                 for step in pair)  # fmt: skip
                custom_time, native_time = (
                    (first, second) if round_index % 2 == 0 else (second, first)
                )
                ratios.append(custom_time / native_time)
                customs.append(custom_time)
                natives.append(native_time)
        finally:
            gc.enable()
        quartiles = statistics.quantiles(ratios, n=4) if rounds > 1 else ratios * 3
        times[kind] = {
            "ratio": statistics.median(ratios),
            "ratio_q1": quartiles[0],
            "ratio_q3": quartiles[-1],
            "custom_seconds": statistics.median(customs),
            "native_seconds": statistics.median(natives),
        }
        print(f"  attention {kind}: {rounds} paired rounds done", file=sys.stderr)
    extra_ratio = saved["custom"]["extra_bytes"] / saved["native"]["extra_bytes"]
    figures = {"extra_saved": extra_ratio, **{k: times[k]["ratio"] for k in times}}
    targets = [
        {"target": name, "ratio": figures[name], "at_most": bound,
         "met": figures[name] <= bound}
        for name, bound in ATTENTION_TARGETS.items()
    ]  # fmt: skip
    return {"saved": saved, "peak_memory": peak, "times": times, "targets": targets}


def print_attention(shape, results: dict) -> None:
    batch, heads, length, features = shape
    print(f"\nattention at B={batch}, H={heads}, L=S={length}, d={features}, float32, "
          "1 thread: ops.scaled_dot_product_attention / MATH backend")  # fmt: skip
    for side, name, _ in ATTENTION_SIDES:
        saved = results["saved"][side]
        print(f"  {side:<7}{name}: saved beyond inputs and output "
              f"{saved['extra_bytes'] / 2**20:8.2f} MiB")  # fmt: skip
    for kind, figures in results["times"].items():
        print(f"  {kind:<17} {figures['custom_seconds']:.3f} s / "
              f"{figures['native_seconds']:.3f} s")  # fmt: skip
    for row in results["targets"]:
        mark = "met" if row["met"] else "MISSED"
        print(f"  target {row['target']:<17} {row['ratio']:.4f} (at most "
              f"{row['at_most']}) {mark}")  # fmt: skip


def run_attention(args, machine: dict) -> None:
    shape = QUICK_ATTENTION_SHAPE if args.quick else ATTENTION_SHAPE
    rounds = args.rounds or (3 if args.quick else 11)
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"\ntiming attention at {shape} ({rounds} paired rounds)...", file=sys.stderr)
    results = measure_attention(shape, rounds)
    print_attention(shape, results)
    output = args.attention_output or (None if args.quick else DEFAULT_ATTENTION_OUTPUT)
    if output is None:
        print("attention results not written (--quick; give --attention-output PATH)")
        return
    batch, heads, length, features = shape
    document = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {**machine, "load_average_end": load_average()},
        "settings": {
            "batch": batch, "heads": heads, "length": length, "source_length": length,
            "features": features, "dtype": "float32", "threads": torch.get_num_threads(),
            "rounds": rounds, "calls_per_timing": 1,
            "clock": "process CPU time (time.process_time)",
            "malloc_mmap_threshold": os.environ.get(MMAP_THRESHOLD, "not set"),
        },
        "sides": {side: name for side, name, _ in ATTENTION_SIDES},
        **results,
    }  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"written to {output}")


# -- Attention on a device: issue 28's GPU targets, side by side ---------------------------------

#: Issue 28's GPU shape (batch, heads, length, features) in bfloat16, and a short one.
DEVICE_ATTENTION_SHAPE = (4, 16, 4096, 64)
QUICK_DEVICE_ATTENTION_SHAPE = (1, 2, 128, 16)
#: ops / MATH at most, in bfloat16 (issue 28); the output error against a float32 reference
#: at most 1.2 times MATH's, in bfloat16 and float16.
DEVICE_TARGETS = {
    "gradient_penalty_time": 0.7,
    "gradient_penalty_peak_memory": 0.3,
    "forward_backward_time": 0.6,
    "bfloat16_error": 1.2,
    "float16_error": 1.2,
}
DEVICE_SIDES = (
    ("ops", ops.scaled_dot_product_attention),
    ("MATH", math_attention),
    ("default kernel", F.scaled_dot_product_attention),
)


def _median_seconds(step, rounds: int, device: torch.device) -> float:
    step()  # warm-up (kernel selection, allocator)
    return statistics.median(seconds_per_call(step, 1, device) for _ in range(rounds))


def measure_device_attention(device: torch.device, shape, rounds: int) -> dict:
    """ops, MATH and the default kernel in bfloat16 on ``device``: forward + backward and
    gradient-penalty time (median of ``rounds``), the penalty's peak memory, and each dtype's
    output error against a float32 reference. A side whose penalty raises is recorded so."""
    generator = torch.Generator().manual_seed(0)
    # Drawn on the CPU, then moved: the same inputs on every device.
    q32, k32, v32, grad32 = (
        torch.randn(shape, generator=generator).to(device) for _ in range(4)
    )
    q, k, v, grad_out = (t.bfloat16() for t in (q32, k32, v32, grad32))
    rows = {}
    for side, fn in DEVICE_SIDES:
        row = {}
        for kind in ATTENTION_KINDS:
            step = attention_step(fn, kind, q, k, v, grad_out)
            try:
                row[f"{kind}_seconds"] = _median_seconds(step, rounds, device)
            except RuntimeError as error:  # the fused kernels' missing double backward
                row[f"{kind}_seconds"] = None
                row[f"{kind}_error"] = str(error).splitlines()[0]
        penalty = attention_step(fn, "gradient_penalty", q, k, v, grad_out)
        row["gradient_penalty_peak_bytes"] = (
            None
            if row["gradient_penalty_seconds"] is None
            else peak_memory(penalty, device)
        )
        rows[side] = row
    reference = F.scaled_dot_product_attention(q32.double(), k32.double(), v32.double())
    errors = {}
    for dtype in (torch.bfloat16, torch.float16):
        inputs = [t.to(dtype) for t in (q32, k32, v32)]
        for side, fn in DEVICE_SIDES[:2]:
            out = fn(*inputs).double()
            errors[f"{side} {str(dtype).removeprefix('torch.')}"] = (
                (out - reference).abs().max().item()
            )
    ops_row, math_row = rows["ops"], rows["MATH"]

    def ratio(key):
        if ops_row.get(key) is None or not math_row.get(key):
            return None
        return ops_row[key] / math_row[key]

    figures = {
        "gradient_penalty_time": ratio("gradient_penalty_seconds"),
        "gradient_penalty_peak_memory": ratio("gradient_penalty_peak_bytes"),
        "forward_backward_time": ratio("forward_backward_seconds"),
        "bfloat16_error": errors["ops bfloat16"] / errors["MATH bfloat16"],
        "float16_error": errors["ops float16"] / errors["MATH float16"],
    }
    targets = [
        {"target": name, "ratio": figures[name], "at_most": bound,
         "met": figures[name] is not None and figures[name] <= bound}
        for name, bound in DEVICE_TARGETS.items()
    ]  # fmt: skip
    return {"sides": rows, "errors": errors, "targets": targets}


def print_device_attention(device: torch.device, shape, results: dict) -> None:
    batch, heads, length, features = shape
    print(f"\nattention on {device} at B={batch}, H={heads}, L={length}, d={features}, "
          "bfloat16: ops against MATH and the default kernel")  # fmt: skip

    def shown(value, scale, unit):
        return "raises" if value is None else f"{value * scale:10.2f} {unit}"

    print(f"  {'':<15}{'fwd+bwd':>13}{'penalty':>13}{'penalty peak':>15}")
    for side, row in results["sides"].items():
        print(f"  {side:<15}{shown(row['forward_backward_seconds'], 1e3, 'ms'):>13}"
              f"{shown(row['gradient_penalty_seconds'], 1e3, 'ms'):>13}"
              f"{shown(row['gradient_penalty_peak_bytes'], 2**-20, 'MiB'):>15}")  # fmt: skip
    for name, error in results["errors"].items():
        print(
            f"  output error, {name}: {error:.5f} (against float64 from the float32 inputs)"
        )
    for row in results["targets"]:
        mark = "met" if row["met"] else "MISSED"
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.3f}"
        print(f"  target {row['target']:<29} ops / MATH {ratio} (at most "
              f"{row['at_most']}) {mark}")  # fmt: skip


def run_device_attention(args) -> None:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available on this machine")
    shape = QUICK_DEVICE_ATTENTION_SHAPE if args.quick else DEVICE_ATTENTION_SHAPE
    rounds = args.rounds or (3 if args.quick else 11)
    results = measure_device_attention(device, shape, rounds)
    print_device_attention(device, shape, results)
    output = args.attention_output
    if output is None:
        print("device attention results not written (give --attention-output PATH)")
        return
    batch, heads, length, features = shape
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    document = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "device": name, "torch": torch.__version__, "rounds": rounds,
        "shape": {"batch": batch, "heads": heads, "length": length, "features": features},
        **results,
    }  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"written to {output}")


# glibc serves allocations at or above its mmap threshold with fresh, zero-filled pages, and
# raises the threshold as large blocks are freed: whether a 4 MB tensor costs page faults then
# depends on what the process freed before, and 1e6-element timings flip from run to run.
# Fixing the threshold (at glibc's initial 128 KiB) turns the adjustment off, so every run
# allocates the way a fresh process does.
MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"
MMAP_THRESHOLD_BYTES = "131072"


def fix_malloc_threshold() -> None:
    """Re-run this script with glibc's mmap threshold fixed, unless it is set already."""
    if MMAP_THRESHOLD not in os.environ and platform.system() == "Linux":
        env = {**os.environ, MMAP_THRESHOLD: MMAP_THRESHOLD_BYTES}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main() -> None:
    fix_malloc_threshold()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds, sizes up to 1e6, short timings; writes nothing "
                        "unless --output is given")  # fmt: skip
    parser.add_argument("--rounds", type=int, help="paired rounds (default 11)")
    parser.add_argument(
        "--output", type=Path, help=f"JSON path (default {DEFAULT_OUTPUT})"
    )
    parser.add_argument("--only", metavar="NAME",
                        help="time only the cases whose name contains NAME; writes nothing "
                        "unless --output is given")  # fmt: skip
    parser.add_argument(
        "--part",
        choices=("all", "functions", "attention"),
        default="all",
        help="measure the Functions, the attention targets, or both",
    )
    parser.add_argument(
        "--attention-output",
        type=Path,
        help=f"attention JSON path (default {DEFAULT_ATTENTION_OUTPUT})",
    )
    parser.add_argument(
        "--device",
        help="cuda (or cpu, to try the code path): issue 28's attention targets on that "
        "device, ops against MATH in bfloat16, printed side by side (nothing else runs)",
    )
    args = parser.parse_args()
    if args.device is not None:
        run_device_attention(args)
        return
    rounds = args.rounds or (3 if args.quick else 11)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    sizes = SIZES[:-1] if args.quick else SIZES
    budget = (
        0.002 if args.quick else 0.02
    )  # seconds of calls per timing, at least one call
    output = args.output or (None if args.quick or args.only else DEFAULT_OUTPUT)
    if args.only:
        cases = [case for case in CASES if args.only.lower() in case.name.lower()]
        if not cases:
            parser.error(
                f"--only {args.only!r} matches no case of {[c.name for c in CASES]}"
            )
        CASES[:] = cases

    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_start = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"NumPy {np.__version__}; load average at start {load_start}")  # fmt: skip
    print(f"{MMAP_THRESHOLD}={os.environ.get(MMAP_THRESHOLD, 'not set')}")
    if args.part in ("all", "attention"):
        machine = {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "load_average_start": load_start,
        }
        run_attention(args, machine)
        if args.part == "attention":
            return

    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda"))
        cuda = torch.cuda.get_device_name()
    else:
        cuda = None
        print("CUDA is not available: the GPU measurements are skipped.")

    saved = saved_rows(TARGET_SIZE)
    print_saved(saved)
    by_device = {}
    target_rows = None
    for device in devices:
        print(f"\ntiming on {device} ({rounds} paired rounds)...", file=sys.stderr)
        times = measure_times(device, sizes, rounds, budget)
        memory = measure_memory(device, sizes)
        print_tables(str(device), sizes, times, memory)
        if device.type == "cpu" and TARGET_SIZE in sizes:
            target_rows = targets(times, saved)
        by_device[str(device)] = {
            "times": [
                {"case": name, "size": size, "kind": kind, **figures}
                for (name, size, kind), figures in times.items()
            ],
            "peak_memory": memory,
        }
    if target_rows:
        print_targets(target_rows)
    load_end = load_average()
    print(f"\nload average at end {load_end} ({os.cpu_count()} cores)")

    if output is None:
        print(
            "results not written (--quick or --only; give --output PATH to keep them)"
        )
        return
    results = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "load_average_start": load_start,
            "load_average_end": load_end,
            "cuda": cuda or "not available: GPU measurements skipped",
        },
        "settings": {
            "dtype": "float32",
            "threads": torch.get_num_threads(),
            "rounds": rounds,
            "sizes": list(sizes),
            "seconds_per_timing": budget,
            "clock": "process CPU time (time.process_time) on the CPU, wall time on a GPU",
            "malloc_mmap_threshold": os.environ.get(MMAP_THRESHOLD, "not set"),
            "target_size": TARGET_SIZE,
        },
        "cases": [
            {"case": case.name, "function": case.function, "native": case.native_name}
            for case in CASES
        ],
        "saved": saved,
        "targets": target_rows,
        "devices": by_device,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
