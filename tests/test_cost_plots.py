"""The cost page's figures draw exactly the numbers they are given.

Each test builds its inputs by hand, so the expected bars and lines are those inputs, read
back from the matplotlib artists.
"""

from __future__ import annotations

import importlib
import sys

import matplotlib
import pytest

matplotlib.use("Agg")  # no display: draw to memory

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from double_backward.cost_plots import (  # noqa: E402
    attention_figure,
    saved_bytes_figure,
    time_against_size_figure,
)
from double_backward.costs import time_series  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def bars(ax) -> list[Rectangle]:
    return [patch for patch in ax.patches if isinstance(patch, Rectangle)]


def row(case, size, ratio, kind="double_backward"):
    return {"case": case, "kind": kind, "size": size, "ratio": ratio,
            "ratio_q1": ratio * 0.9, "ratio_q3": ratio * 1.1}  # fmt: skip


TIMES = [
    row("Square", 1000, 0.5), row("Square", 10, 2.0), row("Square", 100, 1.0),
    row("Square", 100, 9.0, kind="forward_backward"),
    row("Exp", 10, 1.5), row("Exp", 1000, 1.2), row("Exp", 100, 1.1),
]  # fmt: skip


def test_time_series_is_one_case_and_kind_in_ascending_size():
    sizes, ratios, low, high = time_series(TIMES, "Square")
    assert sizes == [10, 100, 1000]
    assert ratios == [2.0, 1.0, 0.5]
    assert low == pytest.approx([1.8, 0.9, 0.45])
    assert high == pytest.approx([2.2, 1.1, 0.55])
    assert time_series(TIMES, "Square", kind="forward_backward")[1] == [9.0]


def test_time_series_of_an_unknown_case_names_those_measured():
    with pytest.raises(ValueError, match=r"no times for case 'Cube'.*\('Exp', 'double_b"):
        time_series(TIMES, "Cube")


def test_saved_bytes_stack_the_new_bytes_after_the_extra_ones():
    fig = saved_bytes_figure({"Square": (0.0, 0.0), "Sinh": (8.0, 0.0), "Tutorial": (8.0, 8.0)})
    (ax,) = fig.axes
    patches = bars(ax)
    extra, new = patches[:3], patches[3:]
    assert [p.get_width() for p in extra] == [0.0, 8.0, 8.0]
    assert [p.get_x() for p in new] == [0.0, 8.0, 8.0]  # new starts where extra ends
    assert [p.get_width() for p in new] == [0.0, 0.0, 8.0]
    assert [label.get_text() for label in ax.get_yticklabels()] == [
        "Square", "Sinh", "Tutorial"
    ]  # fmt: skip
    assert ax.yaxis_inverted()  # read top to bottom in the order given


def test_time_against_size_draws_each_case_of_each_panel_with_its_ratios():
    fig = time_against_size_figure(TIMES, {"left": ["Square", "Exp"], "right": ["Exp"]})
    left, right = fig.axes
    lines = {line.get_label(): line for line in left.get_lines() if line.get_label()[0] != "_"}
    assert list(lines["Square"].get_xdata()) == [10, 100, 1000]
    assert list(lines["Square"].get_ydata()) == [2.0, 1.0, 0.5]
    assert list(lines["Exp"].get_ydata()) == [1.5, 1.1, 1.2]
    assert [line.get_label() for line in right.get_lines() if line.get_label()[0] != "_"] == [
        "Exp"
    ]  # fmt: skip
    assert left.get_title() == "left" and right.get_title() == "right"
    # the line at 1 marks where custom and native take the same time
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in left.get_lines())


def test_time_against_size_refuses_a_case_that_was_not_measured():
    with pytest.raises(ValueError, match="no times for case 'Cube'"):
        time_against_size_figure(TIMES, {"panel": ["Square", "Cube"]})


def test_attention_figure_draws_the_bytes_kept_and_the_committed_ratios():
    attention = {
        "settings": {"batch": 2, "heads": 8, "length": 1024, "features": 64},
        "times": {
            "forward_backward": {"ratio": 0.85, "ratio_q1": 0.8, "ratio_q3": 0.9},
            "gradient_penalty": {"ratio": 1.22, "ratio_q1": 1.2, "ratio_q3": 1.3},
        },
        "targets": [{"target": "forward_backward", "at_most": 1.0},
                    {"target": "gradient_penalty", "at_most": 1.5}],
    }  # fmt: skip
    labels = {"forward_backward": "forward + backward", "gradient_penalty": "penalty"}
    fig = attention_figure(attention, {"ops": 2**20, "MATH": 1024 * 2**20}, labels)
    memory_ax, time_ax = fig.axes
    assert [p.get_width() for p in bars(memory_ax)] == [1.0, 1024.0]  # MiB
    assert [p.get_width() for p in bars(time_ax)] == [0.85, 1.22]
    assert [t.get_text() for t in time_ax.get_yticklabels()] == ["forward + backward", "penalty"]
    (targets,) = [c for c in time_ax.collections if isinstance(c, PathCollection)]  # scatter
    assert [x for x, _ in targets.get_offsets()] == [1.0, 1.5]
    assert "B=2, H=8, L=S=1024, d=64" in fig.get_suptitle()


def test_the_cost_plots_without_matplotlib_name_the_plots_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    for name in [m for m in sys.modules if m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "double_backward.cost_plots")
    with pytest.raises(ImportError) as error:
        importlib.import_module("double_backward.cost_plots")
    assert 'pip install "double-backward[plots] @' in str(error.value)
