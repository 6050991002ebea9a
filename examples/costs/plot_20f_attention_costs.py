r"""
What the replacement attention costs
====================================

torch's default CPU attention kernel has no double backward; its MATH backend has one, but
keeps the L×S attention matrix for backward
(:doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward`).
:func:`double_backward.ops.scaled_dot_product_attention` keeps q, k, v, the output and one
logsumexp per query, and recomputes the matrix in backward. This page counts the memory that
saves and shows the time it costs.
"""

# %%
# Memory kept for backward
# ------------------------
# Counted now at the shape the times below were measured at. q, k and v are views of one
# stacked tensor, so all three count as the input.
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from double_backward import ops
from double_backward.costs import load_measurements, saved_tensors

attention = load_measurements("attention")
shape = attention["settings"]
batch, heads = shape["batch"], shape["heads"]
length, features = shape["length"], shape["features"]


def math_attention(q, k, v):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


attention_sides = {
    "ops.scaled_dot_product_attention": ops.scaled_dot_product_attention,
    "MATH backend": math_attention,
}
qkv = torch.randn(3, batch, heads, length, features)
attention_extra = {
    name: saved_tensors(lambda t, fn=fn: fn(*t.unbind(0)), qkv).extra_bytes
    for name, fn in attention_sides.items()
}
print(f"B={batch}, H={heads}, L=S={length}, d={features}, float32")
for name, extra_bytes in attention_extra.items():
    print(f"{name:<34} kept beyond inputs and output: {extra_bytes / 2**20:6.2f} MiB")
ours, theirs = attention_extra.values()
mark = "met" if ours / theirs <= 0.01 else "MISSED"
print(f"ops / MATH: {ours / theirs:.4f} (target <= 0.01: {mark})")

# %%
# Time and peak memory, measured
# ------------------------------
# Timing on the machine that builds this site would be noise, so the times were measured once,
# on the machine printed below. A training step (forward + backward) and a gradient penalty
# (forward, gradients with ``create_graph=True``, the backward of their squared norm) each ran
# against the MATH backend in paired rounds; the peak memory of each is from
# :func:`~double_backward.costs.peak_memory`.
machine = attention["machine"]
print(f"measured {attention['date']} on {machine['cpu']}, {machine['cores']} cores, "
      f"torch {machine['torch']}, 1 thread, {shape['rounds']} paired rounds")
labels = {
    "forward_backward": "forward + backward",
    "gradient_penalty": "gradient penalty",
}
for kind, label in labels.items():
    row = attention["times"][kind]
    seconds = f"{row['custom_seconds']:.3f} s / {row['native_seconds']:.3f} s"
    print(f"{label:<20} {seconds} = {row['ratio']:.2f}x (middle half "
          f"{row['ratio_q1']:.2f} to {row['ratio_q3']:.2f})")
for kind, label in labels.items():
    peak = attention["peak_memory"][kind]
    print(f"{label:<20} peak memory {peak['custom'] / 2**20:5.0f} MiB / "
          f"{peak['native'] / 2**20:5.0f} MiB")
for row in attention["targets"]:
    mark = "met" if row["met"] else "MISSED"
    print(f"target {row['target']:<17} {row['ratio']:.4f} <= {row['at_most']}: {mark}")


# %%
# Reading the times
# -----------------
# Recomputing costs one more matrix product per backward. Computing the scores a block of
# queries at a time, in one reused buffer instead of a fresh L×S matrix, wins it back when
# nothing is recorded. The gradient penalty's recorded backward builds the whole matrix, as MATH
# does, and its second backward runs this Function's backward once more.

# %%
# The same figures drawn: memory kept for backward on the left (counted now), time on the
# right (measured once), each bar custom / MATH with its target.
from double_backward.cost_plots import attention_figure

# sphinx_gallery_thumbnail_number = 1

attention_figure(attention, attention_extra, labels)
plt.show()

# %%
# Conclusion
# ----------
# A custom Function can be as fast as the native op, or faster when its backward is simpler
# than the general formula (``Square``). Saving an input or an output costs no extra memory;
# returning intermediates as extra outputs costs one tensor each, and
# ``set_materialize_grads(False)`` keeps them from costing zeros, time and ``nan`` as well, in
# eager mode (``torch.compile`` materialises the zeros:
# :doc:`/auto_examples/beyond_python/plot_19_torch_compile`).
# Recompute when memory is the limit. To check that your own Function differentiates twice,
# see :doc:`/auto_examples/when_it_breaks/plot_16_check_your_function`; the rules behind every case
# are in
# :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.
