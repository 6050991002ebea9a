"""load_cuda_measurements: every committed GPU run, in release order, as the files hold them."""

from __future__ import annotations

import json
from pathlib import Path

from double_backward.costs import load_cuda_measurements

CUDA_DIR = (
    Path(__file__).parents[1] / "src" / "double_backward" / "measurements" / "cuda"
)


def test_it_returns_every_committed_file_unchanged():
    on_disk = {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in CUDA_DIR.glob("torch-*.json")
    }
    loaded = load_cuda_measurements()
    assert len(loaded) == len(on_disk) >= 1
    assert sorted(loaded, key=lambda run: run["torch"]) == sorted(
        on_disk.values(), key=lambda run: run["torch"]
    )


def test_releases_come_oldest_first_by_number_not_by_text():
    releases = [
        tuple(map(int, run["torch"].split("."))) for run in load_cuda_measurements()
    ]
    assert releases == sorted(releases)
