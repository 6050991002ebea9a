"""Measure the docs build side by side: clean, no-change, one example edited, standalone.

Run by ``nox -s bench``. Each round, in a scratch copy of the repository, times:

- ``clean``: a docs build from nothing (every example executed);
- ``no_change``: the same build again with nothing changed;
- ``one_edit``: a rebuild after editing one example;
- ``standalone``: every example script run alone with ``python``, summed;
- ``plain``: a Sphinx build of the same pages without executing examples
  (``-D plot_gallery=0``).

It prints the median of each over the rounds and the ratios the project targets, and
checks from sphinx-gallery's own report how many examples each build executed. Absolute
times depend on the machine; the ratios, measured side by side, are what to compare.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from scratch_docs import build_html, copy_sources  # noqa: E402

EDITED_EXAMPLE = "plot_02_saving_outputs.py"
EXECUTED = re.compile(r"successfully executed (\d+) out of (\d+) file")


def sphinx(tree: Path, out: str, *extra: str) -> tuple[float, int]:
    """Build tree/docs into tree/out; return seconds and how many examples were executed."""
    start = time.perf_counter()
    result = build_html(tree, out, *extra)
    seconds = time.perf_counter() - start
    match = EXECUTED.search(result.stdout + result.stderr)
    return seconds, int(match[1]) if match else 0


def run_alone(script: Path) -> float:
    """Seconds to run one example script with plain python, from its own folder."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, script.name],
        cwd=script.parent,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def one_round(tree: Path, quick: bool = False) -> dict[str, float]:
    for generated in ("docs/_build", "docs/auto_examples", "docs/gen_modules"):
        shutil.rmtree(tree / generated, ignore_errors=True)
    figures: dict[str, float] = {}

    figures["clean"], executed = sphinx(tree, "docs/_build/html")
    total = len(list((tree / "examples").glob("plot_*.py")))
    assert executed == total, f"clean build executed {executed} of {total} examples"

    figures["no_change"], executed = sphinx(tree, "docs/_build/html")
    assert executed == 0, f"no-change rebuild executed {executed} examples"

    with open(tree / "examples" / EDITED_EXAMPLE, "a") as example:
        example.write("\n# An edit made by the benchmark.\n")
    figures["one_edit"], executed = sphinx(tree, "docs/_build/html")
    assert executed == 1, f"rebuild after one edit executed {executed} examples"

    scripts = sorted((tree / "examples").glob("plot_*.py"))
    figures["standalone"] = sum(run_alone(script) for script in scripts[: 2 if quick else None])
    shutil.rmtree(tree / "docs" / "auto_examples")
    figures["plain"], executed = sphinx(
        tree, "docs/_build/plain", "-D", "plot_gallery=0"
    )
    assert executed == 0, f"plot_gallery=0 executed {executed} examples"
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds to take medians over"
    )
    parser.add_argument(
        "--quick", action="store_true",
        help="one round, two examples run alone: tries every step (CI does), measures nothing",
    )  # fmt: skip
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.quick:
        args.rounds = 1

    rounds = []
    with tempfile.TemporaryDirectory(prefix="double-backward-bench-") as scratch:
        for number in range(args.rounds):
            tree = copy_sources(Path(scratch) / f"round{number}")
            rounds.append(one_round(tree, args.quick))
            print(
                f"round {number + 1}: "
                + ", ".join(f"{k} {v:.2f} s" for k, v in rounds[-1].items())
            )

    median = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    ratios = {
        "no_change / clean": (median["no_change"] / median["clean"], 0.15),
        "one_edit / clean": (median["one_edit"] / median["clean"], None),
        "clean / (standalone + plain)": (
            median["clean"] / (median["standalone"] + median["plain"]),
            1.5,
        ),
    }
    cpu = os.cpu_count()
    print(
        f"\nmedians over {args.rounds} rounds ({cpu} CPUs, Python {sys.version.split()[0]}):"
    )
    for name, seconds in median.items():
        print(f"  {name:12} {seconds:7.2f} s")
    if args.quick:
        print("--quick: two examples run alone, so the ratios below are not measurements")
    print("ratios (target):")
    for name, (ratio, target) in ratios.items():
        verdict = (
            ""
            if target is None or args.quick  # a quick run measures nothing to judge
            else f"  (<= {target}: {'met' if ratio <= target else 'MISSED'})"
        )
        print(f"  {name:30} {ratio:5.2f}{verdict}")
    print(
        "examples executed: clean = all, no_change = 0, one_edit = 1 (checked each round)"
    )


if __name__ == "__main__":
    main()
