"""Results measured per torch release: the installed one live, the others from committed JSON.

A generated part of the site (the compatibility matrix, the error index, the built-ins table)
is measured with the installed torch at build time. The other tested releases cannot be
installed in the same build, so their results are measured once, by
``nox -s matrix -- 2.14.1`` (which runs this module as a script in a venv with that torch),
and committed as ``docs/_data/<name>/torch-<version>.json`` with the version and the date of
the measurement.

A build then asks :func:`by_version` for one name's results: the live result for the installed
release and the committed file for every other. When a committed file exists for the installed
release too, the live result must equal it cell for cell, or the build fails saying which
cells differ and how to measure again: the committed results are only as good as that check.

Results are JSON objects whose keys are cells (a row and column, a scenario title); a cell that
is live but missing from a committed file (a row added since) is "not measured" there, not an
error. A product too slow to measure at every build (a scan of minutes) uses
:func:`committed_or_measured` instead: the installed release's committed file is used as it is.

To add a product: write ``measure()`` in its extension, returning the results (or a pair,
the results and an ``about`` dict of facts recorded but never compared, such as a duration),
add one line to :data:`PRODUCTS`, and in its Sphinx hook render ``by_version(name, measure())``
(or ``committed_or_measured(name, measure)``), with the committed files in its digest
(:func:`committed_files`). ``nox -s matrix -- 2.14.1`` then writes its file with the others.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parents[1] / "_data"

# name -> "module:function" in docs/_ext/, the function measuring it with the installed torch.
PRODUCTS = {
    "compatibility_matrix": "compatibility_matrix:measure",
    "error_index": "error_index:measure",
    "builtins": "builtins_table:measure",  # a scan of minutes: committed_or_measured
    # The DDP/FSDP page's table: the page computes it live and compares it with these.
    "distributed": "double_backward.distributed.results:measure",
}


class ResultsDiffer(RuntimeError):
    """The live result differs from the one committed for the same torch release."""


@dataclass(frozen=True)
class Measurement:
    """One product measured on one torch release: ``results`` maps a cell to its value."""

    torch: str  # the public release, "2.14.1"
    measured: str  # when, "2026-12-03 18:40 UTC"; "at build time" for a live result
    results: dict[str, Any]
    live: bool = False
    # Recorded with the results but never compared (how long the measurement took, counts).
    about: dict[str, Any] = field(default_factory=dict)


def release(torch_version: str) -> str:
    """The public release of a torch version: ``2.13.0+cpu`` -> ``2.13.0``."""
    return torch_version.split("+")[0]


def installed_torch() -> str:
    return release(version("torch"))


def release_key(torch_version: str) -> tuple[int, ...]:
    """Orders releases numerically (2.9 before 2.13)."""
    return tuple(int(part) for part in release(torch_version).split("."))


def path(name: str, torch_version: str) -> Path:
    return DATA_DIR / name / f"torch-{release(torch_version)}.json"


def committed_files(name: str) -> list[Path]:
    """Every committed file of ``name``, for the digests that decide when to regenerate."""
    return sorted((DATA_DIR / name).glob("torch-*.json"))


def read(file: Path) -> Measurement:
    data = json.loads(file.read_text(encoding="utf-8"))
    return Measurement(
        data["torch"], data["measured"], data["results"], about=data.get("about", {})
    )


def write(
    name: str,
    results: dict[str, Any],
    torch_version: str | None = None,
    about: dict[str, Any] | None = None,
) -> Path:
    """Commit-ready JSON of ``results`` measured now on ``torch_version`` (the installed one);
    ``about``: facts kept beside them that no check compares (a duration, say)."""
    torch_version = torch_version or version("torch")
    file = path(name, torch_version)
    file.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    data = {
        "torch": release(torch_version),
        "torch_build": torch_version,
        "measured": now.strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {_cpus()} CPUs",
        "results": results,
    }
    if about:
        data["about"] = about
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    file.write_text(text, encoding="utf-8")
    return file


def _cpus() -> int:
    return (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count()
    )


def differences(live: dict[str, Any], committed: dict[str, Any]) -> list[str]:
    """The cells of ``committed`` whose value ``live`` does not repeat, one line each."""
    return [
        f"  {cell}: committed {value!r}, live {live.get(cell, '(no such cell)')!r}"
        for cell, value in committed.items()
        if live.get(cell) != value
    ]


def by_version(
    name: str, live_results: dict[str, Any], installed: str | None = None
) -> dict[str, Measurement]:
    """Every tested release's results for ``name``, oldest first: the installed release's
    live, the others committed. Raises :class:`ResultsDiffer` when a file committed for the
    installed release disagrees with the live result."""
    installed = release(installed or version("torch"))
    measurements = {}
    for file in committed_files(name):
        measurement = read(file)
        if measurement.torch == installed:
            differing = differences(live_results, measurement.results)
            if differing:
                raise ResultsDiffer(
                    f"{name}: the result measured now with torch {installed} differs from "
                    f"{file.relative_to(DATA_DIR.parent.parent)} (measured "
                    f"{measurement.measured}) in {len(differing)} cell(s):\n"
                    + "\n".join(differing)
                    + f"\nIf the change is intended, measure again: nox -s matrix -- {installed}"
                )
            continue
        measurements[measurement.torch] = measurement
    measurements[installed] = Measurement(
        installed, "at build time", live_results, live=True
    )
    return dict(sorted(measurements.items(), key=lambda item: release_key(item[0])))


def committed_or_measured(
    name: str, measure: Callable[[], dict[str, Any]], installed: str | None = None
) -> dict[str, Measurement]:
    """As :func:`by_version`, for a product too slow to measure at every build (minutes): the
    installed release's committed file is taken as it is, unchecked; ``measure`` runs, and
    its result is written, only when that release has none. Its check is then
    ``nox -s matrix`` writing the same file again."""
    build = installed or version("torch")
    if not path(name, build).exists():
        results, about = _results_and_about(measure())
        write(name, results, build, about)
    measurements = {read(file).torch: read(file) for file in committed_files(name)}
    return dict(sorted(measurements.items(), key=lambda item: release_key(item[0])))


def changed_cells(
    measurements: dict[str, Measurement], shown=lambda value: value
) -> dict[str, dict[str, Any]]:
    """Cells whose ``shown`` value differs between releases that measured them:
    cell -> {release: value}, for the releases that have the cell."""
    cells: dict[str, dict[str, Any]] = {}
    for measurement in measurements.values():
        for cell, value in measurement.results.items():
            cells.setdefault(cell, {})[measurement.torch] = value
    return {
        cell: values
        for cell, values in cells.items()
        if len({json.dumps(shown(value), sort_keys=True) for value in values.values()})
        > 1
    }


def _results_and_about(measured) -> tuple[dict[str, Any], dict[str, Any] | None]:
    return measured if isinstance(measured, tuple) else (measured, None)


def measure_all() -> list[Path]:
    """Measure every product with the installed torch and write its JSON."""
    sys.path.insert(0, str(Path(__file__).parent))
    written = []
    for name, target in PRODUCTS.items():
        module_name, function = target.split(":")
        measure = getattr(importlib.import_module(module_name), function)
        results, about = _results_and_about(measure())
        written.append(write(name, results, about=about))
    return written


if __name__ == "__main__":  # nox -s matrix: python docs/_ext/versioned_results.py
    for file in measure_all():
        print(f"wrote {file}")
