"""Per-call overhead of a custom operator against a custom Function, and the cost of a compile.

The custom-operator and torch.compile pages print these figures instead of timing at build
time: a timing taken while the site builds depends on the machine and its load, and two builds
would differ. Run ``nox -s bench_call_overhead`` (or ``python benchmarks/call_overhead.py``) to
rewrite ``src/double_backward/measurements/call_overhead.json``, then rebuild the docs.

Each figure is the best of ``--repeat`` runs of ``--number`` calls, on a 100-element float64
tensor, one thread. The custom operator and the Function are timed back to back in each run,
alternating which goes first, so a busy machine hits both alike; the ratio is the median of the
per-run ratios. The compile of ``Square`` (``aot_eager``, forward and backward) is timed after
``torch._dynamo.reset()``, once first in the process and then ``--repeat`` more times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from functions import cpu_model, load_average  # noqa: E402

from double_backward import Cube, Square  # noqa: E402
from double_backward.functions.custom_ops import cube  # noqa: E402

DEFAULT_OUTPUT = (
    ROOT / "src" / "double_backward" / "measurements" / "call_overhead.json"
)


def per_call(step, number: int) -> float:
    started = time.perf_counter()
    for _ in range(number):
        step()
    return (time.perf_counter() - started) / number


def forward_backward(fn, t):
    return lambda: torch.autograd.grad(fn(t).sum(), t)


def call_times(number: int, repeat: int) -> dict:
    t = torch.randn(100, dtype=torch.float64, requires_grad=True)
    pairs = {
        "forward": (lambda: Cube.apply(t), lambda: cube(t)),
        "forward_backward": (
            forward_backward(Cube.apply, t),
            forward_backward(cube, t),
        ),
    }
    results = {}
    for kind, (function, operator) in pairs.items():
        function(), operator()  # warm up
        function_times, operator_times = [], []
        for run in range(repeat):
            order = [(function, function_times), (operator, operator_times)]
            for step, times in order if run % 2 == 0 else order[::-1]:
                times.append(per_call(step, number))
        ratios = [o / f for o, f in zip(operator_times, function_times, strict=True)]
        results[kind] = {
            "Cube Function us": round(min(function_times) * 1e6, 1),
            "cube operator us": round(min(operator_times) * 1e6, 1),
            "operator / Function": round(statistics.median(ratios), 2),
        }
    return results


def compile_times(repeat: int) -> dict:
    x = torch.tensor([-1.5, 0.5, 2.0], dtype=torch.float64, requires_grad=True)

    def compile_once() -> float:
        torch._dynamo.reset()
        started = time.perf_counter()
        compiled = torch.compile(Square.apply, backend="aot_eager", fullgraph=True)
        torch.autograd.grad(compiled(x).sum(), x)
        return time.perf_counter() - started

    first = compile_once()
    later = [compile_once() for _ in range(repeat)]
    eager = min(per_call(lambda: Square.apply(x), 300) for _ in range(repeat))
    return {
        "first in the process s": round(first, 2),
        "after reset, best s": round(min(later), 3),
        "after reset, worst s": round(max(later), 3),
        "eager call us": round(eager * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_start = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "load_average_start": load_start,
        },
        "settings": {
            "dtype": "float64",
            "elements": 100,
            "threads": 1,
            "number": args.number,
            "repeat": args.repeat,
        },  # fmt: skip
        "calls": call_times(args.number, args.repeat),
        "compile Square (aot_eager)": compile_times(args.repeat),
    }
    results["machine"]["load_average_end"] = load_average()
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
