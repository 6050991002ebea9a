r"""
Time against size
=================

How long a double backward takes through each Function of the package, against the native op
it reimplements. Timing on the machine that builds this site would be noise, so the times come
from one measurement run, on the machine printed below; the page draws them and checks them
against the project's targets.
"""

# %%
# What was timed
# --------------
# A *double backward* is forward, a ``create_graph=True`` backward, and the backward of that:
# what a gradient penalty or a Hessian-vector product runs. It is timed in two cases. With a
# plain ``grad_out`` (one that does not require grad), it is a Hessian-vector product of ``f``
# alone; with a ``grad_out`` that requires grad, it is a gradient penalty or a composed loss.
#
# How it was timed
# ----------------
# The custom Function and its native op ran back to back in each round, in process CPU time.
# Each figure is the median of the per-round ratios custom / native.
from double_backward.costs import load_measurements

measurements = load_measurements()
machine, settings = measurements["machine"], measurements["settings"]
print(f"measured {measurements['date']} on {machine['cpu']}, {machine['cores']} cores "
      f"(shared with other users), Python {machine['python']}, torch {machine['torch']}, "
      f"NumPy {machine['numpy']}")
print(f"load average {machine['load_average_start'][0]} at start, "
      f"{machine['load_average_end'][0]} at end")
sizes = ", ".join(f"{size:.0e}" for size in settings["sizes"])
print(f"{settings['dtype']}, {settings['threads']} thread, "
      f"median of {settings['rounds']} paired rounds, at {sizes} elements")

# %%
# Time against size
# -----------------
# Double backward, custom / native, at each size: below the dotted line the custom Function is
# the faster. The band spans the middle half of the rounds. At small sizes every call is mostly
# Python and dispatch, where a custom Function pays for ``apply``; from about 1e5 elements the
# kernels and their memory traffic decide. (``Square`` and ``Cube`` in the ``setup_context``
# style are on the next page.)
import matplotlib.pyplot as plt

from double_backward.cost_plots import time_against_size_figure

# sphinx_gallery_thumbnail_number = 1
times = measurements["devices"]["cpu"]["times"]
time_against_size_figure(times, {
    "The package's Functions": ["Square", "Exp", "Sinh", "Cube (NumPy backward)", "Sin",
                                "Cos"],
    "Ways to write sinh": ["Sinh", "Sinh, before: out of place", "Sinh, tutorial form",
                           "Sinh, zeros materialised", "Sinh, recompute in backward",
                           "Sinh, native ops inside"],
})
plt.show()

# %%
# The targets
# -----------
# The project's targets are set at 1e6 elements. Double backward may take at most 1.0× native
# for ``Square``, 1.15× for ``Exp``, 1.25× for ``Cube`` with its NumPy backward and 1.5× for
# ``Sinh``, and they may save 0, 0, 0 and 2 extra tensors. Each time target is checked with a
# plain ``grad_out`` and with one requiring grad; the saved tensors are counted now.
import torch

from double_backward.costs import CASES, saved_tensors

x = torch.randn(100_000)
saved = {case.name: saved_tensors(case.custom, x) for case in CASES}


def ratios_at_target(kind):
    return {
        r["case"]: r["ratio"]
        for r in times
        if r["size"] == settings["target_size"] and r["kind"] == kind
    }


time_at_target = ratios_at_target("double_backward")
penalty_at_target = ratios_at_target("penalty_double_backward")
for case in CASES:
    if case.time_target is None:
        continue
    extra_count = len(saved[case.name].extra)
    for label, ratio in (("plain grad_out", time_at_target[case.name]),
                         ("grad_out requiring grad", penalty_at_target[case.name])):
        time_mark = "met" if ratio <= case.time_target else "MISSED"
        print(f"{case.name:<22} {label:<24} time {ratio:.2f}x "
              f"(<= {case.time_target:.2f}: {time_mark})")
    saved_mark = "met" if extra_count == case.extra_saved_target else "MISSED"
    print(f"{case.name:<22} extra tensors {extra_count} "
          f"(= {case.extra_saved_target}: {saved_mark})")

# %%
# Next
# ----
# Why some Functions beat their native op and others do not comes down to the kernels each
# backward runs: :doc:`/auto_examples/costs/plot_20c_fewer_kernels`. Every case at every size, as
# numbers:
# :doc:`/costs`.
