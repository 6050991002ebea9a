"""What one ``double_backward.check`` costs against the input size (``nox -s bench_checker``).

For a passing and a failing Function of each kind, from 1e3 to 1e6 elements, one check with
the default settings is run in a fresh process (after a warm-up on a small input, so that
torch's one-time imports and code pages are not counted). Printed side by side:

- wall-clock seconds, CPU seconds (user + system, all threads: what the check costs when
  the machine is not shared), and how much the CPU time grew from the previous row for ten
  times the elements (linear growth: 10x);
- the peak memory the check added (resident set size), as a multiple of the inputs' size,
  beside the same figure for one Hessian-vector product by hand (the cost of the Function's
  own double backward, which the check cannot go below);
- the verdict.

Then the detection figure: how often the Hessian-vector-product check misses an error of 5%
planted on a single element (the hardest case), with one and with the default two
directions, against the bound derived on plot_16.

Timings are wall-clock on whatever machine runs this: compare rows of one run, not runs. The
load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.checker_cases, also when run as a script

# name -> (module:attribute of the Function, how to build inputs of n elements)
FUNCTIONS = {
    "Square (passes)": ("double_backward:Square", "vector"),
    "SinhSavesIntermediate (fails)": (
        "double_backward.functions.failures:SinhSavesIntermediate", "vector"),
    "RMSNorm recomputing rstd (passes)": ("benchmarks.checker_cases:RMSNormRecompute", "rows"),
    "RMSNorm saving rstd (fails)": ("benchmarks.checker_cases:RMSNormSavesRstd", "rows"),
}  # fmt: skip


def _inputs(kind: str, n: int, seed: int = 0) -> tuple:
    import torch

    generator = torch.Generator().manual_seed(seed)
    if kind == "vector":
        return (torch.randn(n, generator=generator, dtype=torch.float64),)
    width = 100 if n >= 1000 else 10
    x = torch.randn(n // width, width, generator=generator, dtype=torch.float64)
    return x, torch.rand(width, generator=generator, dtype=torch.float64) + 0.5, 1e-6


def measure(target: str, kind: str, n: int) -> dict:
    """One check of ``target`` at ``n`` elements (run in a child process)."""
    import importlib
    import time

    import torch

    from double_backward import check

    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name).apply
    check(fn, *_inputs(kind, 40 if kind == "vector" else 400))  # warm up
    inputs = _inputs(kind, n)
    input_bytes = sum(x.numel() * x.element_size() for x in inputs if torch.is_tensor(x))

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    # The reference: one Hessian-vector product by hand, what the user's own training step
    # with double backward costs.
    before = peak()
    x = inputs[0].clone().requires_grad_()
    out = fn(x, *inputs[1:])
    (grad,) = torch.autograd.grad(out, x, torch.randn_like(out), create_graph=True)
    if grad.requires_grad:
        torch.autograd.grad(grad, x, torch.randn_like(x))
    del x, out, grad
    hvp_memory = max(0, peak() - before) / input_bytes
    before, start, start_cpu = peak(), time.perf_counter(), cpu()
    report = check(fn, *inputs)
    return {
        "seconds": time.perf_counter() - start,
        "cpu": cpu() - start_cpu,
        "memory": max(0, peak() - before) / input_bytes,
        "hvp_memory": hvp_memory,
        "verdict": ", ".join(sorted(report.problem_names())) or "ok",
    }


def detection(trials: int) -> dict[int, int]:
    from benchmarks.checker_cases import misses

    return {directions: misses(directions, trials) for directions in (1, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--trials", type=int, default=1000,
                        help="trials of the planted 5%% error (0: skip)")  # fmt: skip
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        target, kind, n = args.child
        print(json.dumps(measure(target, kind, int(n))))
        return
    import torch

    sizes = [int(s) for s in args.sizes.split(",")]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {torch.get_num_threads()} "
          f"threads, load average {load}")  # fmt: skip
    print(f"{'Function':34} {'elements':>9} {'seconds':>8} {'CPU s':>7} {'growth':>7} "
          f"{'memory':>7} {'HVP':>6}  verdict")  # fmt: skip
    for name, (target, kind) in FUNCTIONS.items():
        previous = None
        for size in sizes:
            child = subprocess.run(
                [sys.executable, __file__, "--child", target, kind, str(size)],
                capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            row = json.loads(child.stdout.splitlines()[-1])
            growth = f"{row['cpu'] / previous:.1f}x" if previous else ""
            print(f"{name:34} {size:>9} {row['seconds']:>8.2f} {row['cpu']:>7.2f} "
                  f"{growth:>7} {row['memory']:>6.1f}x {row['hvp_memory']:>5.1f}x  "
                  f"{row['verdict']}")  # fmt: skip
            previous = row["cpu"]
    if args.trials:
        misses = detection(args.trials)
        bound = (2 / torch.pi) ** 0.5 * 1e-3 / 0.05
        print(f"\nA 5% HVP error on one element, {args.trials} trials at 1000 elements:")
        for directions, count in misses.items():
            print(f"  {directions} direction(s): missed {count} times "
                  f"({count / args.trials:.2%}); bound {bound ** directions:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
