r"""
Recompute or save?
==================

A Function that needs an intermediate in backward can save it from forward, as ``Sinh`` saves
its exponentials, or recompute it in backward from the saved input. Saving costs memory for as
long as the graph lives; recomputing costs time while backward runs. This page sets the two
side by side, with the peak memory of one double backward for every Function of the package.
"""

# %%
# Saving only the input
# ---------------------
# :class:`~double_backward.functions.sinh_variants.SinhRecompute` saves only ``x`` and
# recomputes both exponentials in backward. It has no extra outputs and keeps nothing extra
# between forward and backward; it pays with two more exponentials per backward.
#
# .. literalinclude:: /../src/double_backward/functions/sinh_variants.py
#    :pyobject: SinhRecompute

# %%
# When recomputing wins
# ---------------------
# Saving costs 8 bytes per element for as long as the graph lives, which in a deep network is
# from the forward of the layer to its backward. When memory decides how large a batch or model
# fits, recompute (the trade ``torch.utils.checkpoint.checkpoint`` makes for whole blocks); when
# time does, save. Wrapping the native kernels themselves in a Function
# (:class:`~double_backward.functions.sinh_variants.SinhNativeOps`) costs a fixed overhead per
# call (``apply``), which large sizes dilute.

# %%
# The three, measured
# -------------------
# Below, for each way of writing sinh: the extra bytes saved (counted now), the peak memory of
# one double backward and the time at 1e6 elements (both measured once, on the machine of
# :doc:`/auto_examples/costs/plot_20b_time_against_size`), then the time at each size.
import torch

from double_backward.costs import CASES, load_measurements, saved_tensors, time_series

measurements = load_measurements()
settings = measurements["settings"]
times = measurements["devices"]["cpu"]["times"]
size_labels = "".join(f"{size:>8.0e}" for size in settings["sizes"])


def ratio_row(name: str, kind: str = "double_backward") -> str:
    """A case's time, custom / native, at each size."""
    ratios = time_series(times, name, kind)[1]
    return f"{name:<28}" + "".join(f"{ratio:>8.2f}" for ratio in ratios)


def ratios_at_target(kind):
    return {
        r["case"]: r["ratio"]
        for r in times
        if r["size"] == settings["target_size"] and r["kind"] == kind
    }


time_at_target = ratios_at_target("double_backward")
penalty_at_target = ratios_at_target("penalty_double_backward")

n = 100_000
saved = {case.name: saved_tensors(case.custom, torch.randn(n)) for case in CASES}
peaks = {
    row["case"]: row
    for row in measurements["devices"]["cpu"]["peak_memory"]
    if row["size"] == settings["target_size"]
}
for name in ("Sinh", "Sinh, recompute in backward", "Sinh, native ops inside"):
    extra_bytes = saved[name].extra_bytes / n
    peak = peaks[name]["custom_peak_bytes"] / settings["target_size"]
    native_peak = peaks[name]["native_peak_bytes"] / settings["target_size"]
    ratio = time_at_target[name]
    print(f"{name:<28} extra {extra_bytes:.0f} B/elt, peak {peak:.0f} B/elt "
          f"(torch.sinh {native_peak:.0f}), time {ratio:.2f}x")
print(f"\n{'':<28}{size_labels}")
for name in ("Sinh", "Sinh, recompute in backward", "Sinh, native ops inside"):
    print(ratio_row(name))

# %%
# Peak memory of one double backward
# ----------------------------------
# The most memory allocated at once during one double backward at 1e6 elements, above the
# input, measured once from the allocations and frees ``torch.profiler`` records
# (:func:`~double_backward.costs.peak_memory`). It sees torch's allocator only: the NumPy
# temporaries of ``Cube``'s backward are not in it. Three rows here; every Function's, drawn
# below and listed on :doc:`/costs`.
print(f"{'':<28} {'custom':>12} {'native':>12}")
for name in ("Sinh", "Sinh, recompute in backward", "Cube (NumPy backward)"):
    row = peaks[name]
    custom, native = (row[f"{side}_peak_bytes"] / settings["target_size"]
                      for side in ("custom", "native"))
    print(f"{name:<28} {custom:8.1f} B/elt {native:8.1f} B/elt")

# %%
# The same peaks, drawn
# ---------------------
# Each Function beside its native op, in bytes per element of the input.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
names = list(peaks)
figure, axes = plt.subplots(figsize=(6, 0.35 * len(names) + 1), layout="constrained")
positions = range(len(names))
for offset, side, label in ((-0.2, "custom", "custom Function"), (0.2, "native", "native op")):
    axes.barh([p + offset for p in positions],
              [peaks[name][f"{side}_peak_bytes"] / settings["target_size"] for name in names],
              0.4, label=label)
axes.set_yticks(list(positions), names)
axes.invert_yaxis()
axes.set(xlabel="peak bytes per element, one double backward at 1e6")
axes.legend()
plt.show()

# %%
# Next
# ----
# The same trade for a built-in: attention that recomputes its L × S matrix instead of keeping
# it, :doc:`/auto_examples/costs/plot_20f_attention_costs`.
