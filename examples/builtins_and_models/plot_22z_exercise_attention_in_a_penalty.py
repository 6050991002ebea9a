r"""
Exercise: attention inside a gradient penalty
=============================================

``self_attention`` below is the attention of a small model, and a gradient penalty needs its
second derivative. Nothing in it is custom: the failure comes from a built-in, on the path
PyTorch takes for these inputs on a CPU. Download this page's script, fix ``self_attention``
without changing what it computes, and run it: :func:`double_backward.check` says whether you
got it right.
"""

# %%
# The function to fix
# -------------------
# 4-D inputs (batch, heads, tokens, features) and no dropout.
import torch

import double_backward


def self_attention(q):
    return torch.nn.functional.scaled_dot_product_attention(q, q, q)


# %%
# The verdict
# -----------
torch.manual_seed(0)
q = torch.randn(1, 2, 3, 4, dtype=torch.float64)
report = double_backward.check(self_attention, q)
print(report)

# %%
# The first derivative has a graph; the error only comes at the second backward, from the
# fused kernel's backward node.
from double_backward.graph import autograd_graph

q_leaf = q.clone().requires_grad_()
(grad_q,) = torch.autograd.grad(self_attention(q_leaf).sum(), q_leaf, create_graph=True)
autograd_graph(
    {"grad_q": grad_q},
    {"q": q_leaf},
    title="Graph of grad_q through the fused attention kernel's backward",
)

# %%
# .. raw:: html
#
#    <details class="exercise-solution"><summary>The solution (open once you have tried)</summary>
#
# Use :func:`double_backward.ops.scaled_dot_product_attention`, the same attention written
# in ops whose backward can be differentiated; or select the math backend around the call
# with ``torch.nn.attention.sdpa_kernel``.


def self_attention_fixed(q):
    return double_backward.ops.scaled_dot_product_attention(q, q, q)


fixed = double_backward.check(self_attention_fixed, q)
print(fixed)
difference = (self_attention_fixed(q) - self_attention(q)).abs().max().item()
print(f"largest difference from torch's attention: {difference:.1e}")

# %%
# .. raw:: html
#
#    </details>
#
# Both verdicts, as the build measured them:
print(f"self_attention:       ok = {report.ok}")
print(f"self_attention_fixed: ok = {fixed.ok}")
assert not report.ok and fixed.ok
