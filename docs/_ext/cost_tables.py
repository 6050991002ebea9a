"""The measured costs' reference tables: every case, size and kind of run, from the committed runs.

The cost lessons draw these numbers and print the few rows their claims need; the whole tables
are reference material, so they are rendered here, once, for the page ``costs.md``, which
includes ``_generated/cost_tables.md``. Nothing is timed at build time: the numbers are the
package's committed measurements (:func:`double_backward.costs.load_measurements`), and the page
says on what machine and when they were taken. A cell the run did not measure is left out: a
table holds only the sizes every one of its rows has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

KINDS = {
    "double_backward": "Double backward, plain `grad_out`",
    "penalty_double_backward": "Double backward, `grad_out` requiring grad (a gradient penalty)",
    "forward_backward": "Forward + backward",
}


def _machine_line(measurements: dict[str, Any]) -> str:
    machine, settings = measurements["machine"], measurements["settings"]
    return (
        f"Measured {measurements['date']} on {machine['cpu']}, {machine['cores']} cores "
        f"(shared), torch {machine['torch']}, {settings['dtype']}, {settings['threads']} "
        f"thread, median of {settings['rounds']} paired rounds."
    )


def _ratio_table(rows: list[dict[str, Any]], cases: list[str]) -> list[str]:
    """A Markdown table: one row per case, one column per size, the median ratio in each."""
    ratio = {(row["case"], row["size"]): row["ratio"] for row in rows}
    sizes = sorted(
        size
        for size in {row["size"] for row in rows}
        if all((case, size) in ratio for case in cases)
    )
    lines = [
        "| Function | " + " | ".join(f"{size:.0e}" for size in sizes) + " |",
        "| --- |" + " ---: |" * len(sizes),
    ]
    for case in cases:
        cells = " | ".join(f"{ratio[(case, size)]:.2f}" for size in sizes)
        lines.append(f"| {case} | {cells} |")
    return lines


def render(functions: dict[str, Any], softmax_layer_norm: dict[str, Any]) -> str:
    """The tables' Markdown, from the two committed runs."""
    out = [
        "## The package's Functions against their native ops",
        "",
        _machine_line(functions),
        "Each cell is the time custom / native, at that many elements: below 1 the custom "
        "Function is the faster.",
        "",
    ]
    times = functions["devices"]["cpu"]["times"]
    for kind, title in KINDS.items():
        rows = [row for row in times if row["kind"] == kind]
        if not rows:
            continue
        cases = list(dict.fromkeys(row["case"] for row in rows))
        out += [f"### {title}", "", *_ratio_table(rows, cases), ""]
    peaks = functions["devices"]["cpu"].get("peak_memory", [])
    if peaks:
        out += [
            "### Peak memory of one double backward",
            "",
            "Bytes per element above the input, at "
            f"{functions['settings']['target_size']:.0e} elements.",
            "",
            "| Function | custom | native |",
            "| --- | ---: | ---: |",
        ]
        for row in peaks:
            if row["size"] == functions["settings"]["target_size"]:
                size = row["size"]
                out.append(
                    f"| {row['case']} | {row['custom_peak_bytes'] / size:.1f} | "
                    f"{row['native_peak_bytes'] / size:.1f} |"
                )
        out.append("")
    out += [
        "## Softmax and LayerNorm against `torch.softmax` and `F.layer_norm`",
        "",
        _machine_line(softmax_layer_norm),
        f"Rows of {softmax_layer_norm['settings']['row']} elements.",
        "",
    ]
    cases = [case["case"] for case in softmax_layer_norm["cases"]]
    for kind, title in KINDS.items():
        rows = [row for row in softmax_layer_norm["times"] if row["kind"] == kind]
        if rows:
            out += [f"### {title}", "", *_ratio_table(rows, cases), ""]
    return "\n".join(out)


def _write(app) -> None:
    from source_digest import digest, regenerate

    from double_backward import costs

    path = Path(app.srcdir) / "_generated" / "cost_tables.md"
    key = digest(
        Path(__file__)
    )  # the package's committed measurements are in every digest
    regenerate(
        path,
        key,
        lambda: render(
            costs.load_measurements("functions"),
            costs.load_measurements("softmax_layer_norm"),
        ),
    )


def setup(app) -> dict[str, object]:
    app.connect("builder-inited", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
