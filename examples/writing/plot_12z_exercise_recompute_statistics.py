r"""
Exercise: a statistic saved from forward
========================================

``Normalize`` below scales a vector to unit length, :math:`y = x / \lVert x \rVert`. Its
backward is the right formula, :math:`g / n - x \, (x \cdot g) / n^3` with
:math:`n = \lVert x \rVert`, and its first derivative passes. Its second derivative fails,
for the reason *Deriving a double backward* gave for softmax and LayerNorm. Download this
page's script, fix ``Normalize``, and run it: :func:`double_backward.check` says whether you
got it right.
"""

# %%
# The Function to fix
# -------------------
# Forward computes the norm anyway, so it saves it beside the input.
import torch

import double_backward


class Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        norm = x.norm()
        ctx.save_for_backward(x, norm)
        return x / norm

    @staticmethod
    def backward(ctx, grad_out):
        x, norm = ctx.saved_tensors
        return grad_out / norm - x * (x * grad_out).sum() / norm**3


# %%
# The verdict
# -----------
x = torch.tensor([3.0, -1.0, 2.0, 0.5], dtype=torch.float64)
report = double_backward.check(Normalize.apply, x)
print(report)

# %%
# In the gradient's graph the norm is missing: saved from forward, it is a constant to
# autograd, so the second backward cannot see that it depends on ``x``.
from double_backward.graph import autograd_graph

x_leaf = x.clone().requires_grad_()
y = Normalize.apply(x_leaf)
(grad_x,) = torch.autograd.grad(y[0], x_leaf, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x_leaf},
    title="Graph of grad_x for the buggy Normalize: the norm is a leaf",
)

# %%
# .. raw:: html
#
#    <details class="exercise-solution"><summary>The solution (open once you have tried)</summary>
#
# Save only the input, and recompute the norm in backward, where ``create_graph=True``
# records it (returning it as a second output, with its gradient added in backward, works
# too).


class NormalizeFixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / x.norm()

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        norm = x.norm()
        return grad_out / norm - x * (x * grad_out).sum() / norm**3


fixed = double_backward.check(NormalizeFixed.apply, x)
print(fixed)

# %%
# .. raw:: html
#
#    </details>
#
# Both verdicts, as the build measured them:
print(f"Normalize:      ok = {report.ok}")
print(f"NormalizeFixed: ok = {fixed.ok}")
assert not report.ok and fixed.ok
