"""What one ``double_backward.check`` costs against the input size (``nox -s bench_checker``).

For a passing and a failing Function of each kind (and the two-output ``Sinh``, whose
intermediates are outputs), from 1e3 to 1e6 elements, each in a fresh process (after a
warm-up on a small input, so that torch's one-time imports and code pages are not counted),
the check with the default settings and one Hessian-vector product by hand are timed side by
side, best of ``--repeats`` each, alternating. Printed:

- the check's wall-clock seconds, its CPU seconds (user + system, all threads: what the check
  costs when the machine is not shared), and how much the CPU time grew from the previous row
  for ten times the elements (linear growth: 10x);
- one HVP by hand, as a user writes it: the Function's forward, backward with
  ``create_graph=True`` and a second backward, through all outputs, with ``v`` and ``u`` drawn
  by ``torch.randn_like`` (issue 41's yardstick), and the check's time in such HVPs; then the
  same HVP with ``v`` and ``u`` given (the Function's own work alone, which the check cannot go
  below) and the check's time in those;
- the peak memory the check added (resident set size, the peak reset before it), as a multiple
  of the inputs' size, beside the same figure for one HVP by hand: "held", with glibc's
  allocator set to give freed memory back at once (``MALLOC_MMAP_THRESHOLD_``, in a process
  of its own), what the check's tensors took at their peak; "RSS", with the allocator as it
  comes, which also counts freed memory the allocator kept (how much depends on what the
  process allocated before: the same check measured 17x to 27x for ``Square`` at 10^6);
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
import math
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
    "Sinh, 2 extra outputs (passes)": ("double_backward:Sinh", "vector"),
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


def _peak_reset() -> int | None:
    """Reset the peak resident set size (Linux: /proc/self/clear_refs), and return the
    current one; None where it cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return _peak()
    except OSError:
        return None


def _peak() -> int:
    """The peak resident set size in bytes since the last reset (or since the start)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def one_hvp(fn, inputs: tuple, directions: tuple | None = None) -> None:
    """One Hessian-vector product by hand: forward, backward with ``create_graph=True``
    through all outputs, a second backward. ``directions``: (v per output, u); without them,
    drawn here with ``torch.randn_like``, as a user would."""
    import torch

    x = inputs[0].detach().requires_grad_()
    outs = fn(x, *inputs[1:])
    outs = [o for o in (outs if isinstance(outs, tuple) else (outs,)) if o.requires_grad]
    v, u = directions if directions else ([torch.randn_like(o) for o in outs], None)
    (grad,) = torch.autograd.grad(outs, x, v, create_graph=True)
    if grad.requires_grad:
        torch.autograd.grad(grad, x, torch.randn_like(x) if u is None else u)


# glibc's allocator gives every freed block above 128 kB back to the system at once, so that
# the peak resident memory is what the tensors held at their peak (measured: the same figure
# as the profiler's allocation events, 11x and 18x for Square and Sinh at 10^6).
RETURNS_FREED = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def measure(target: str, kind: str, n: int, repeats: int = 3, memory_only: bool = False
            ) -> dict:  # fmt: skip
    """The check of ``target`` at ``n`` elements and one HVP by hand, side by side (run in a
    child process)."""
    import gc
    import importlib
    import time

    import torch

    from double_backward import check

    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name).apply
    check(fn, *_inputs(kind, 40 if kind == "vector" else 400))  # warm up
    inputs = _inputs(kind, n)
    input_bytes = sum(x.numel() * x.element_size() for x in inputs if torch.is_tensor(x))

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def added(compute) -> tuple[float, object]:
        """The peak memory ``compute`` added, per byte of the inputs, and its result."""
        gc.collect()
        before = _peak_reset()
        before = _peak() if before is None else before
        result = compute()
        return max(0, _peak() - before) / input_bytes, result

    # Memory first, each from a reset peak (the check's is not hidden under the HVP's).
    hvp_memory, _ = added(lambda: one_hvp(fn, inputs))
    memory, report = added(lambda: check(fn, *inputs))
    if memory_only:
        return {"memory": memory, "hvp_memory": hvp_memory}
    with torch.no_grad():
        outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    given = ([torch.randn_like(o) for o in outs], torch.randn_like(inputs[0]))
    best = {"hvp": math.inf, "bare": math.inf, "check": math.inf}
    check_cpu = math.inf
    for _ in range(repeats):
        for what, run in (("hvp", lambda: one_hvp(fn, inputs)),
                          ("bare", lambda: one_hvp(fn, inputs, given)),
                          ("check", lambda: check(fn, *inputs))):  # fmt: skip
            gc.collect()
            start, start_cpu = time.perf_counter(), cpu()
            run()
            seconds = time.perf_counter() - start
            if seconds < best[what]:
                best[what] = seconds
                if what == "check":
                    check_cpu = cpu() - start_cpu
    return {
        "seconds": best["check"],
        "cpu": check_cpu,
        "hvp": best["hvp"],
        "bare_hvp": best["bare"],
        "memory": memory,
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
    parser.add_argument("--repeats", type=int, default=3,
                        help="timings per row, the best kept (check and HVP alternate)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (default: torch's own choice); 1 on a shared machine")
    parser.add_argument("--only", default="",
                        help="only the Functions whose name contains this, e.g. Sinh")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        target, kind, n = args.child
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        print(json.dumps(measure(target, kind, int(n), args.repeats, args.memory_only)))
        return
    import torch

    sizes = [int(s) for s in args.sizes.split(",")]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    threads = args.threads or torch.get_num_threads()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {threads} "
          f"threads, load average {load}")  # fmt: skip
    print(f"{'Function':34} {'elements':>9} {'seconds':>8} {'CPU s':>7} {'growth':>7} "
          f"{'HVP ms':>8} {'ratio':>6} {'bare ms':>8} {'ratio':>6} {'held':>6} {'HVP':>6} "
          f"{'RSS':>6} {'HVP':>6}  verdict")  # fmt: skip
    for name, (target, kind) in FUNCTIONS.items():
        if args.only not in name:
            continue
        previous = None
        for size in sizes:
            command = [sys.executable, __file__, "--child", target, kind, str(size),
                       "--repeats", str(args.repeats), "--threads", str(args.threads)]
            child = subprocess.run(command, capture_output=True, text=True, check=True,
                                   cwd=ROOT)  # fmt: skip
            row = json.loads(child.stdout.splitlines()[-1])
            held = subprocess.run([*command, "--memory-only"], capture_output=True, text=True,
                                  check=True, cwd=ROOT, env={**os.environ, **RETURNS_FREED})
            held = json.loads(held.stdout.splitlines()[-1])
            growth = f"{row['cpu'] / previous:.1f}x" if previous else ""
            print(f"{name:34} {size:>9} {row['seconds']:>8.3f} {row['cpu']:>7.2f} "
                  f"{growth:>7} {row['hvp'] * 1e3:>8.2f} {row['seconds'] / row['hvp']:>5.1f}x "
                  f"{row['bare_hvp'] * 1e3:>8.2f} {row['seconds'] / row['bare_hvp']:>5.0f}x "
                  f"{held['memory']:>5.1f}x {held['hvp_memory']:>5.1f}x "
                  f"{row['memory']:>5.1f}x {row['hvp_memory']:>5.1f}x  "
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
