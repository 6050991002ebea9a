"""Time every Function of the package against its native op, side by side, and count memory.

Run by ``nox -s bench_functions`` (``-- --quick`` for a short trial run). For each case of
:data:`double_backward.costs.CASES`, at 1e3 to 1e7 float32 elements on one thread:

- ``forward_backward``: forward, then the gradient (one training step);
- ``double_backward``: forward, a ``create_graph=True`` backward, and the backward of that;

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

from double_backward import costs
from double_backward.costs import (
    Case,
    double_backward,
    forward_backward,
    peak_memory,
    saved_tensors,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "src" / "double_backward" / "measurements" / "functions.json"
SIZES = (10**3, 10**4, 10**5, 10**6, 10**7)
TARGET_SIZE = 10**6
KINDS = ("forward_backward", "double_backward")
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
    return (
        lambda: double_backward(case.custom, x, grad_out, grad_grad_x),
        lambda: double_backward(case.native, x, grad_out, grad_grad_x),
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
            "calls_per_timing": next(c for k, *_, c in plan if k == key),
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
        rows.append({
            "case": case.name,
            "time_ratio": ratio,
            "time_target": case.time_target,
            "time_met": ratio <= case.time_target,
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
        print(
            f"  {row['case']:<24} time {row['time_ratio']:.2f} (target <= "
            f"{row['time_target']:.2f}) {time_mark:<7} extra saved "
            f"{row['extra_saved']} (target {row['extra_saved_target']}) {saved_mark}"
        )


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
    args = parser.parse_args()
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
