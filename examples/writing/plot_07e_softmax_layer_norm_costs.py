r"""
What the softmax and LayerNorm versions cost
============================================

The softmax versions of :doc:`/auto_examples/writing/plot_07b_softmax_by_hand` and the
LayerNorm versions of
:doc:`/auto_examples/writing/plot_07c_layer_norm_trap` compute the same derivatives in
different ways. This page
compares their time against the native ops and counts the bytes each keeps for backward.
"""

# %%
# What it costs in time
# ---------------------
# Timing on the machine that builds this site would be noise, so the times were measured once,
# on the machine printed below. Rows of 256 float32 elements, one thread, each Function and its
# native op back to back in every round; each figure is the median of the per-round ratios
# custom / native. *Double backward* is forward, a ``create_graph=True`` backward and a
# Hessian-vector product with respect to every input. The same tables are on :doc:`/costs`.
from double_backward.costs import load_measurements

measured = load_measurements("softmax_layer_norm")
machine, settings = measured["machine"], measured["settings"]
print(f"measured {measured['date']} on {machine['cpu']}, {machine['cores']} cores (shared), "
      f"torch {machine['torch']}, {settings['dtype']}, {settings['threads']} thread, "
      f"median of {settings['rounds']} paired rounds")
sizes = settings["sizes"]
ratios = {(r["case"], r["size"], r["kind"]): r["ratio"] for r in measured["times"]}
for kind in ("double_backward", "forward_backward"):
    print(f"\n{kind.replace('_', ' ')}, custom / native    "
          + "".join(f"{size:>8.0e}" for size in sizes))
    for case in measured["cases"]:
        cells = "".join(f"{ratios[(case['case'], size, kind)]:>8.2f}" for size in sizes)
        print(f"{case['case']:<36}{cells}")

# %%
# What each keeps for backward
# ----------------------------
# Counted now, exactly, with :func:`~double_backward.costs.saved_tensors`. *Extra* bytes are
# those saved by forward beyond the input and the output (the weight and bias count, being
# fixed tensors rather than the function's input). *New in backward* are those the
# ``create_graph=True`` backward saves anew for the second backward. Both are per element of a
# float32 input of 64 rows of 256.
import torch
import torch.nn.functional as F

from double_backward.costs import saved_tensors
from double_backward.functions.failures import layer_norm_saves_statistics
from double_backward.functions.layer_norm import layer_norm, layer_norm_with_statistics
from double_backward.functions.softmax import (
    softmax,
    softmax_hand_written,
    softmax_with_jvp,
)

torch.manual_seed(0)

x_rows = torch.randn(64, 256)
w_rows, b_rows = torch.randn(256), torch.randn(256)
savers = {
    "torch.softmax": lambda t: torch.softmax(t, -1),
    "Softmax": lambda t: softmax(t, -1),
    "SoftmaxHandWritten": lambda t: softmax_hand_written(t, -1),
    "SoftmaxWithJvp": lambda t: softmax_with_jvp(t, -1),
    "F.layer_norm": lambda t: F.layer_norm(t, (256,), w_rows, b_rows),
    "LayerNorm": lambda t: layer_norm(t, (256,), w_rows, b_rows),
    "LayerNormWithStatistics": lambda t: layer_norm_with_statistics(
        t, (256,), w_rows, b_rows
    ),
    "the trap": lambda t: layer_norm_saves_statistics(t, (256,), w_rows, b_rows),
}
print(f"{'':<24}{'extra B/elt':>12}{'new in backward B/elt':>24}")
reports = {}
for name, fn in savers.items():
    report = reports[name] = saved_tensors(fn, x_rows)
    print(f"{name:<24}{report.extra_bytes / x_rows.numel():>12.2f}"
          f"{report.new_in_backward_bytes / x_rows.numel():>24.1f}")

# %%
# The same counts, drawn: bytes per element kept from forward (extra) and saved anew by the
# first backward.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, axes = plt.subplots(figsize=(6, 3.5), layout="constrained")
positions = range(len(reports))
axes.barh([p - 0.2 for p in positions],
          [r.extra_bytes / x_rows.numel() for r in reports.values()], 0.4, label="extra")
axes.barh([p + 0.2 for p in positions],
          [r.new_in_backward_bytes / x_rows.numel() for r in reports.values()], 0.4,
          label="new in backward")
axes.set_yticks(list(positions), list(reports))
axes.invert_yaxis()
axes.set(xlabel="bytes per element of the input")
axes.legend()
plt.show()

# %%
# Reading the times
# -----------------
# At first order a custom Function pays for not being fused. :func:`torch.softmax` and
# :func:`~torch.nn.functional.layer_norm` each run one kernel per pass, where these backward
# formulas run one torch op per term. In a double backward the native ops run their derivative
# formulas op by op too, so the ratios come closer to 1.

# %%
# Reading the bytes
# -----------------
# The two softmax Functions that write the double backward by hand save nothing new in their
# first backward: ``SoftmaxBackward`` keeps ``grad_out`` and ``y``, which exist anyway. The trap
# is the cheapest LayerNorm, because it skips exactly the terms it gets wrong. Recomputing keeps
# nothing extra between forward and backward; returning the statistics keeps two numbers per
# row.

# %%
# The native LayerNorm's advantage
# --------------------------------
# All three custom LayerNorm versions keep tensors the size of the input for a second backward
# (the *new in backward* column). The native op's first backward keeps only tensors that exist
# anyway (``grad_out``, the input, its statistics). Its double backward is one formula written
# by hand.

# %%
# Conclusion
# ----------
# To derive double backward for any op, write backward as :math:`g(\bar{y}, x)`. Its derivative
# with respect to :math:`\bar{y}` is the op's JVP; its derivative with respect to :math:`x` is
# the mixed term. Build :math:`g` from tensors autograd tracks (inputs, outputs, or
# intermediates returned as outputs), or write both parts in a Function of its own. A statistic
# saved from forward is an intermediate, even when the first derivative accounts for it: the
# fused-kernel LayerNorm gets its Hessian wrong, and the native op its third derivative.
#
# Next: third and higher orders, :doc:`/auto_examples/writing/plot_08_higher_orders`; to check your
# own Function,
# :doc:`/auto_examples/when_it_breaks/plot_16_check_your_function`.
