"""The measured costs' reference tables: every committed ratio, in the cell of its case and size."""

from __future__ import annotations

import json
from pathlib import Path

import cost_tables

MEASUREMENTS = Path(__file__).parents[2] / "src" / "double_backward" / "measurements"


def _load(name):
    return json.loads((MEASUREMENTS / f"{name}.json").read_text(encoding="utf-8"))


def _tables(markdown):
    """Each ### table's rows, as {case: {size label: cell}}."""
    tables, title, header = {}, None, None
    for line in markdown.splitlines():
        if line.startswith("### "):
            title, header = line[4:], None
        elif line.startswith("| ") and title:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if header is None:
                header = cells
            else:
                tables.setdefault(title, {})[cells[0]] = dict(
                    zip(header[1:], cells[1:], strict=True)
                )
    return tables


def test_every_committed_double_backward_ratio_is_in_its_cell():
    functions, softmax = _load("functions"), _load("softmax_layer_norm")
    tables = _tables(cost_tables.render(functions, softmax))
    plain = tables["Double backward, plain `grad_out`"]
    rows = [
        r
        for r in functions["devices"]["cpu"]["times"]
        if r["kind"] == "double_backward"
    ]
    assert rows
    for row in rows:
        assert plain[row["case"]][f"{row['size']:.0e}"] == f"{row['ratio']:.2f}"


def test_a_size_some_case_lacks_is_left_out_not_shown_empty():
    functions, softmax = _load("functions"), _load("softmax_layer_norm")
    times = functions["devices"]["cpu"]["times"]
    dropped = next(
        r for r in times if r["kind"] == "double_backward" and r["case"] == "Square"
    )
    functions["devices"]["cpu"]["times"] = [r for r in times if r is not dropped]
    plain = _tables(cost_tables.render(functions, softmax))[
        "Double backward, plain `grad_out`"
    ]
    label = f"{dropped['size']:.0e}"
    assert all(label not in cells for cells in plain.values())
    assert all("" not in cells.values() for cells in plain.values())


def test_the_peak_memory_table_is_per_element_at_the_target_size():
    functions, softmax = _load("functions"), _load("softmax_layer_norm")
    peaks = _tables(cost_tables.render(functions, softmax))[
        "Peak memory of one double backward"
    ]
    target = functions["settings"]["target_size"]
    for row in functions["devices"]["cpu"]["peak_memory"]:
        if row["size"] == target:
            assert (
                peaks[row["case"]]["custom"]
                == f"{row['custom_peak_bytes'] / target:.1f}"
            )
