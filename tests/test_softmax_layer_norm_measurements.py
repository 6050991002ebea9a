"""The committed softmax and LayerNorm timings cover every case the derivation page prints."""

from __future__ import annotations

import importlib
import json
from importlib import resources

MEASUREMENTS = resources.files("double_backward").joinpath(
    "measurements", "softmax_layer_norm.json"
)


def test_every_case_names_a_function_of_the_package():
    measured = json.loads(MEASUREMENTS.read_text(encoding="utf-8"))
    for case in measured["cases"]:
        module, _, name = case["function"].rpartition(".")
        assert hasattr(importlib.import_module(module), name), case


def test_every_case_is_timed_at_every_size_for_both_steps():
    measured = json.loads(MEASUREMENTS.read_text(encoding="utf-8"))
    timed = {(r["case"], r["size"], r["kind"]) for r in measured["times"]}
    expected = {
        (case["case"], size, kind)
        for case in measured["cases"]
        for size in measured["settings"]["sizes"]
        for kind in ("forward_backward", "double_backward")
    }
    assert timed == expected
    assert all(r["ratio"] > 0 for r in measured["times"])
