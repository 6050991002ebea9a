"""How long one ``double_backward.check`` takes against the input size (``nox -s bench_checker``).

For each Function and each size from 10 to 100,000 elements, one full check (two points,
gradcheck and gradgradcheck, the forward-mode comparisons, the torch.func probes) is timed, the
best of ``--repeat`` runs. Above 100 elements gradcheck runs in fast mode, so the time should
grow about linearly; the last column is how much the time grew from the previous row, for
ten times the elements (linear growth: 10x at most). Timings are wall-clock on
whatever machine runs this: on a shared machine, compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import time

import torch

from double_backward import Square, check
from double_backward.functions import setup_context_style

FUNCTIONS = {
    "Square (old style)": Square.apply,
    "Cube (setup_context, jvp)": setup_context_style.Cube.apply,
}


def best_time(fn, size: int, repeat: int) -> tuple[float, bool]:
    x = torch.randn(size, generator=torch.Generator().manual_seed(size))
    times, ok = [], True
    for _ in range(repeat):
        start = time.perf_counter()
        report = check(fn, x)
        times.append(time.perf_counter() - start)
        ok = ok and report.ok
    return min(times), ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for fn in FUNCTIONS.values():  # warm up torch's lazy initialisation (forward AD, func)
        check(fn, torch.randn(3))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; best of {args.repeat}")
    print(f"{'Function':28} {'elements':>9} {'seconds':>9} {'growth':>8}  verdict")
    for name, fn in FUNCTIONS.items():
        previous = None
        for size in sizes:
            seconds, ok = best_time(fn, size, args.repeat)
            growth = f"{seconds / previous:.1f}x" if previous else ""
            verdict = "ok" if ok else "PROBLEM"
            print(f"{name:28} {size:>9} {seconds:>9.3f} {growth:>8}  {verdict}")
            previous = seconds


if __name__ == "__main__":
    main()
