"""The plots of the "What it costs" page, drawn with matplotlib (the ``plots`` extra).

The page shows what a reader should conclude from each figure; how the bars and lines are
laid out lives here. Each function draws one figure from measurements the page has already
computed or loaded, and returns it; ``plt.show()`` displays it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._extras import missing_extra
from .costs import time_series

try:
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter
except ImportError as error:  # the "plots" extra
    raise missing_extra("double_backward.cost_plots (the cost plots)", "plots", error) from error

__all__ = ["attention_figure", "saved_bytes_figure", "time_against_size_figure"]


def saved_bytes_figure(per_element: Mapping[str, tuple[float, float]]) -> Figure:
    """Bars of the bytes per element each Function keeps beyond its input and output.

    ``per_element`` maps a Function's name to (bytes its forward saves as extra tensors,
    bytes its ``create_graph=True`` backward saves anew), both per element of the input.
    """
    names = list(per_element)
    extra = np.array([per_element[name][0] for name in names])
    new = np.array([per_element[name][1] for name in names])
    fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    ax.barh(names, extra, color="#c0392b", label="extra, saved by forward")
    ax.barh(
        names, new, left=extra, color="#e59866", label="new, saved by the first backward"
    )
    ax.invert_yaxis()
    ax.set_xlabel("bytes per element (float32)")
    ax.legend(loc="lower right")
    ax.set_title("Kept for backward beyond input and output")
    return fig


def time_against_size_figure(
    times: Sequence[Mapping[str, Any]], panels: Mapping[str, Sequence[str]]
) -> Figure:
    """Double backward time, custom / native, against size: one panel per entry of ``panels``
    (title to the names of the cases it draws), each line with the band of its middle half."""
    fig, axes = plt.subplots(
        1, len(panels), figsize=(10, 6), sharey=True, layout="constrained", squeeze=False
    )
    for ax, (title, cases) in zip(axes[0], panels.items(), strict=True):
        for index, name in enumerate(cases):
            sizes, ratio, low, high = time_series(times, name)
            style = "--" if "before" in name else "-"
            line = ax.plot(sizes, ratio, style, marker="o", markersize=3, label=name,
                           color=plt.cm.tab10(index))[0]  # fmt: skip
            ax.fill_between(sizes, low, high, color=line.get_color(), alpha=0.12)
        ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
        ax.set(xscale="log", yscale="log", xlabel="elements (float32)", title=title)
        ax.set_yticks([0.25, 0.5, 1, 2, 4], labels=["0.25", "0.5", "1", "2", "4"])
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(
            fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2
        )
    axes[0][0].set_ylabel("double backward time, custom / native")
    fig.suptitle("Double backward time, custom Function / native op, float32, 1 thread")
    return fig


def attention_figure(
    attention: Mapping[str, Any],
    extra_bytes: Mapping[str, float],
    labels: Mapping[str, str],
) -> Figure:
    """Attention against the MATH backend: on the left the bytes each side keeps beyond
    inputs and output (``extra_bytes``, name to bytes); on the right the committed time
    ratios of ``attention`` (``load_measurements("attention")``), one bar per kind in
    ``labels`` (kind to label), with its middle half and its target."""
    fig, (memory_ax, time_ax) = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
    names = list(extra_bytes)
    memory_bars = memory_ax.barh(names, [extra_bytes[name] / 2**20 for name in names],
                                 color=["#2e86c1", "#c0392b"])  # fmt: skip
    memory_ax.bar_label(memory_bars, fmt="%.2f MiB", padding=3)
    memory_ax.set(
        xscale="log", xlim=(0.01, 5000), xlabel="MiB kept beyond inputs and output"
    )
    memory_ax.invert_yaxis()
    times = attention["times"]
    kinds = list(labels)
    ratios = [times[kind]["ratio"] for kind in kinds]
    spread = np.array([[ratio - times[kind]["ratio_q1"], times[kind]["ratio_q3"] - ratio]
                       for kind, ratio in zip(kinds, ratios, strict=True)]).T  # fmt: skip
    time_bars = time_ax.barh([labels[kind] for kind in kinds], ratios, xerr=spread,
                             color="#2e86c1")  # fmt: skip
    time_ax.bar_label(time_bars, fmt="%.2fx", label_type="center", color="white")
    targets = {row["target"]: row["at_most"] for row in attention["targets"]}
    time_ax.scatter([targets[kind] for kind in kinds], [labels[kind] for kind in kinds],
                    marker="|", s=400, color="black", label="target", zorder=3)  # fmt: skip
    time_ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
    time_ax.set(xlabel="time, ops / MATH backend", xlim=(0, 2.2))
    time_ax.invert_yaxis()
    time_ax.legend(loc="upper right")
    shape = attention["settings"]
    fig.suptitle(
        f"Attention, B={shape['batch']}, H={shape['heads']}, L=S={shape['length']}, "
        f"d={shape['features']}, float32, 1 thread"
    )
    return fig
