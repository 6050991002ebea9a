r"""
What the attention fixes keep for backward
==========================================

:doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward` fixed a
gradient penalty through attention
twice: with torch's MATH backend, and with ``double_backward.ops.scaled_dot_product_attention``.
Both give the same gradients. This page counts what each keeps for backward, exactly, with
:func:`double_backward.costs.saved_tensors`.
"""

# %%
# What MATH keeps for backward
# ----------------------------
# MATH keeps the attention matrix for backward, L x L per head. The count below is one
# self-attention call at B=2, H=8, L=1024, d=64 whose query, key and value are the input. An
# *extra* tensor is one kept only for backward.
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from double_backward import ops
from double_backward.costs import saved_tensors


def self_attention_under_math(t):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(t, t, t)


x = torch.randn(2, 8, 1024, 64)
for kept in saved_tensors(self_attention_under_math, x).forward:
    print(f"{kept.role:7} {str(tuple(kept.shape)):20} {kept.nbytes:>12,} bytes")

# %%
# What the custom Function keeps
# ------------------------------
# The custom Function keeps q, k, v, the output and one logsumexp per query, and recomputes the
# matrix in backward. Its extra bytes grow with L, where MATH's grow with L².
def self_attention_with_ops(t):
    return ops.scaled_dot_product_attention(t, t, t)


extra = {}
print(f"{'L':>5} {'MATH extra bytes':>17} {'ops extra bytes':>16} {'ratio':>7}")
for length in (256, 1024):
    x = torch.randn(2, 8, length, 64)
    math_bytes = saved_tensors(self_attention_under_math, x).extra_bytes
    ops_bytes = saved_tensors(self_attention_with_ops, x).extra_bytes
    extra[length] = (math_bytes, ops_bytes)
    print(
        f"{length:>5} {math_bytes:>17,} {ops_bytes:>16,} {math_bytes / ops_bytes:>7.0f}"
    )


# %%
# The same counts, drawn
# ----------------------
# Bytes kept only for backward, on a log scale, at the two lengths.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, axes = plt.subplots(figsize=(5, 3), layout="constrained")
positions = range(len(extra))
axes.bar([p - 0.2 for p in positions], [m / 2**20 for m, _ in extra.values()], 0.4,
         label="MATH backend")
axes.bar([p + 0.2 for p in positions], [o / 2**20 for _, o in extra.values()], 0.4,
         label="ops.scaled_dot_product_attention")
axes.set_xticks(list(positions), [f"L = {length}" for length in extra])
axes.set(yscale="log", ylabel="MiB kept for backward", ylim=(None, 2e4))
axes.legend()
plt.show()

# %%
# Next
# ----
# Recomputing costs time: one more matrix product per backward. What that costs, measured:
# :doc:`/auto_examples/costs/plot_20f_attention_costs`. ``torch.cdist`` has a trap of the same kind,
# which depends on
# the input's size: :doc:`/auto_examples/builtins_and_models/plot_14c_cdist_size_trap`.
