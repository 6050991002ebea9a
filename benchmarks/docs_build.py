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

``--quick`` (CI) tries every step and every check once and measures nothing: its builds
execute only QUICK_EXAMPLES (sphinx-gallery renders the other pages without output), and
those examples are the ones run alone.
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

EDITED_EXAMPLE = "tutorial/plot_02_saving_outputs.py"
# The examples a quick run's builds execute: the edited one, so that the one-edit rebuild
# still executes 1, and one more, so that the clean build's count (2) tells "the selected
# examples" from "the edited one alone" as well as from "all".
QUICK_EXAMPLES = ("tutorial/plot_01_saving_inputs.py", EDITED_EXAMPLE)
# sphinx-gallery executes the examples whose full path this matches (re.search), the others
# it renders without running them.
QUICK_PATTERN = "/(" + "|".join(re.escape(name) for name in QUICK_EXAMPLES) + ")$"
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
    scripts = sorted((tree / "examples").rglob("plot_*.py"))
    # The same override on every executing build: a change of configuration would make
    # Sphinx reread everything, and a wider pattern would run the examples skipped before.
    select: tuple[str, ...] = ()
    if quick:
        select = ("-D", f"sphinx_gallery_conf.filename_pattern={QUICK_PATTERN}")
        # Selected as sphinx-gallery selects, so a renamed example shows as a wrong count.
        scripts = [
            script for script in scripts if re.search(QUICK_PATTERN, str(script))
        ]
        assert len(scripts) == len(QUICK_EXAMPLES), (
            f"QUICK_PATTERN selects {[s.name for s in scripts]}, not {QUICK_EXAMPLES}"
        )

    figures["clean"], executed = sphinx(tree, "docs/_build/html", *select)
    assert executed == len(scripts), (
        f"clean build executed {executed} examples, not the {len(scripts)} it should"
    )

    figures["no_change"], executed = sphinx(tree, "docs/_build/html", *select)
    assert executed == 0, f"no-change rebuild executed {executed} examples"

    with open(tree / "examples" / EDITED_EXAMPLE, "a") as example:
        example.write("\n# An edit made by the benchmark.\n")
    figures["one_edit"], executed = sphinx(tree, "docs/_build/html", *select)
    assert executed == 1, f"rebuild after one edit executed {executed} examples"

    figures["standalone"] = sum(run_alone(script) for script in scripts)
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
        help="one round, the builds executing two examples and those two run alone: "
        "tries every step and check (CI does), measures nothing",
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
        print(
            f"--quick: one round; the builds executed only {', '.join(QUICK_EXAMPLES)}, which"
            " also ran alone: the times are of that, the ratios below are not measurements"
        )
    print("ratios (target):")
    for name, (ratio, target) in ratios.items():
        verdict = (
            ""
            if target is None or args.quick  # a quick run measures nothing to judge
            else f"  (<= {target}: {'met' if ratio <= target else 'MISSED'})"
        )
        print(f"  {name:30} {ratio:5.2f}{verdict}")
    clean = f"the {len(QUICK_EXAMPLES)} selected" if args.quick else "all"
    print(
        f"examples executed: clean = {clean}, no_change = 0, one_edit = 1 (checked each round)"
    )


if __name__ == "__main__":
    main()
