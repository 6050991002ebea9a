"""Time the softmax and LayerNorm Functions of "Deriving double backward" against native torch.

Run by ``nox -s bench_functions`` after ``benchmarks/functions.py`` (``-- --quick`` for a short
trial run, which writes nothing unless ``--output`` is given). Rows of 256 float32 elements,
1e4 to 1e6 elements in all, on one thread, each Function against its native op
(:func:`torch.softmax` over the last dim, :func:`torch.nn.functional.layer_norm` with weight and
bias):

- ``forward_backward``: forward, then the gradients of every input (one training step);
- ``double_backward``: forward, a ``create_graph=True`` backward, and the gradient of
  ⟨gradients, v⟩ with respect to every input (a Hessian-vector product, mixed terms included).

Timed as ``benchmarks/functions.py`` times the elementwise cases, whose helpers it uses: paired
rounds in this process's CPU time, custom and native back to back (which goes first alternates),
the figure being the median of the per-round ratios custom / native. Writes the package's
``measurements/softmax_layer_norm.json``, which the page reads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

# The shared timing helpers of the elementwise benchmark, beside this script.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from functions import (  # noqa: E402
    MMAP_THRESHOLD,
    cpu_model,
    fix_malloc_threshold,
    load_average,
    paired_rounds,
    seconds_per_call,
)

from double_backward.functions import failures, layer_norm, softmax  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = (
    ROOT / "src" / "double_backward" / "measurements" / "softmax_layer_norm.json"
)
ROW = 256
SIZES = (10**4, 10**5, 10**6)
TARGET_SIZE = 10**6
KINDS = ("forward_backward", "double_backward")
DEVICE = torch.device("cpu")

_FUNCTIONS = "double_backward.functions"


def _softmax_case(fn):
    return lambda x, weight, bias: fn(x, -1)


def _layer_norm_case(fn):
    return lambda x, weight, bias: fn(x, (ROW,), weight, bias)


#: (name, dotted path, custom, native name, native, takes weight and bias)
CASES = [
    ("softmax: differentiable ops", f"{_FUNCTIONS}.softmax.Softmax",
     _softmax_case(softmax.softmax), "torch.softmax", _softmax_case(torch.softmax), False),
    ("softmax: SoftmaxBackward", f"{_FUNCTIONS}.softmax.SoftmaxHandWritten",
     _softmax_case(softmax.softmax_hand_written), "torch.softmax",
     _softmax_case(torch.softmax), False),
    ("softmax: jvp reused", f"{_FUNCTIONS}.softmax.SoftmaxWithJvp",
     _softmax_case(softmax.softmax_with_jvp), "torch.softmax",
     _softmax_case(torch.softmax), False),
    ("LayerNorm: recompute", f"{_FUNCTIONS}.layer_norm.LayerNorm",
     _layer_norm_case(layer_norm.layer_norm), "F.layer_norm",
     _layer_norm_case(F.layer_norm), True),
    ("LayerNorm: statistics as outputs", f"{_FUNCTIONS}.layer_norm.LayerNormWithStatistics",
     _layer_norm_case(layer_norm.layer_norm_with_statistics), "F.layer_norm",
     _layer_norm_case(F.layer_norm), True),
    ("LayerNorm: the trap (wrong Hessian)", f"{_FUNCTIONS}.failures.LayerNormSavesStatistics",
     _layer_norm_case(failures.layer_norm_saves_statistics), "F.layer_norm",
     _layer_norm_case(F.layer_norm), True),
]  # fmt: skip


def make_inputs(size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    def randn(*shape):
        return torch.randn(shape, generator=generator)

    rows = size // ROW
    return {
        "x": randn(rows, ROW), "weight": randn(ROW), "bias": randn(ROW),
        "grad_out": randn(rows, ROW), "v_x": randn(rows, ROW),
        "v_weight": randn(ROW), "v_bias": randn(ROW),
    }  # fmt: skip


def step(fn, kind: str, tensors: dict[str, torch.Tensor], affine: bool) -> Callable:
    """One forward + backward, or one forward + backward + Hessian-vector product."""
    names = ("x", "weight", "bias") if affine else ("x",)

    def run():
        leaves = {n: tensors[n].detach().requires_grad_() for n in names}
        inputs = [leaves[n] for n in names]
        y = fn(leaves["x"], leaves.get("weight"), leaves.get("bias"))
        create_graph = kind == "double_backward"
        grads = torch.autograd.grad(
            y, inputs, tensors["grad_out"], create_graph=create_graph
        )
        if not create_graph:
            return grads
        dot = sum(
            (g * tensors[f"v_{n}"]).sum() for g, n in zip(grads, names, strict=True)
        )
        return torch.autograd.grad(dot, inputs, allow_unused=True)

    return run


def measure(sizes, rounds: int, budget: float) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    inputs = {size: make_inputs(size, generator) for size in sizes}
    plan = []
    for name, _, custom_fn, _, native_fn, affine in CASES:
        for size in sizes:
            for kind in KINDS:
                custom = step(custom_fn, kind, inputs[size], affine)
                native = step(native_fn, kind, inputs[size], affine)
                custom(), native()  # warm-up
                one_call = max(seconds_per_call(custom, 1, DEVICE),
                               seconds_per_call(native, 1, DEVICE))  # fmt: skip
                calls = max(1, int(budget / max(one_call, 1e-7)) + 1)
                plan.append(((name, size, kind), custom, native, calls))
    return [
        {"case": name, "size": size, "kind": kind, **figures}
        for (name, size, kind), figures in paired_rounds(plan, rounds, DEVICE).items()
    ]


def print_table(sizes, rows: list[dict]) -> None:
    ratio = {(r["case"], r["size"], r["kind"]): r["ratio"] for r in rows}
    width = max(len(case[0]) for case in CASES) + 2
    for kind in KINDS:
        print(
            f"\n{kind.replace('_', ' ')} time, custom / native (median of paired rounds)"
        )
        print("case".ljust(width) + "".join(f"{size:>9.0e}" for size in sizes))
        for name, *_ in CASES:
            cells = "".join(f"{ratio[(name, size, kind)]:>9.2f}" for size in sizes)
            print(name.ljust(width) + cells)


def main() -> None:
    fix_malloc_threshold()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds, short timings; writes nothing unless --output")  # fmt: skip
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
    budget = 0.002 if args.quick else 0.02  # seconds of calls per timing
    output = args.output or (None if args.quick or args.only else DEFAULT_OUTPUT)
    if args.only:
        cases = [case for case in CASES if args.only.lower() in case[0].lower()]
        if not cases:
            print(
                f"--only {args.only!r} matches none of {[c[0] for c in CASES]}: skipped"
            )
            return
        CASES[:] = cases

    torch.set_num_threads(1)
    load_start = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"load average at start {load_start}")  # fmt: skip
    rows = measure(SIZES, rounds, budget)
    print_table(SIZES, rows)
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
            "cpu": cpu_model(), "cores": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "numpy": np.__version__,
            "load_average_start": load_start, "load_average_end": load_end,
        },
        "settings": {
            "dtype": "float32", "threads": torch.get_num_threads(), "rounds": rounds,
            "sizes": list(SIZES), "row": ROW, "seconds_per_timing": budget,
            "clock": "process CPU time (time.process_time)",
            "malloc_mmap_threshold": os.environ.get(MMAP_THRESHOLD, "not set"),
            "target_size": TARGET_SIZE,
        },
        "cases": [
            {"case": name, "function": path, "native": native_name}
            for name, path, _, native_name, _, _ in CASES
        ],
        "times": rows,
    }  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
