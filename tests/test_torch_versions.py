"""The torch releases the project claims are the ones it tests: pyproject's floor is the lowest
release in ``tested-torch`` (what ``nox -s tests_torch`` runs), and the pin is one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TESTED = PYPROJECT["tool"]["double_backward"]["tested-torch"]


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_declared_floor_is_the_lowest_tested_release():
    (requirement,) = [
        dependency
        for dependency in PYPROJECT["project"]["dependencies"]
        if re.match(r"torch\b", dependency)
    ]
    floor = re.fullmatch(r"torch>=([\d.]+),<3", requirement.replace(" ", ""))
    assert floor, f"expected torch>=X,<3, got {requirement!r}"
    lowest = min(TESTED, key=_release)
    assert _release(floor[1]) == _release(lowest)[: len(_release(floor[1]))], (
        f"pyproject declares torch>={floor[1]} but the lowest release tested is {lowest}"
    )


def test_the_pinned_release_is_tested():
    pins = re.findall(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)
    assert pins and pins[0] in TESTED
