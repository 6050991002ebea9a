r"""
Exercise: a shortcut that costs the second derivative
=====================================================

``Cube`` below saves its input, and its backward is the right formula, :math:`3 x^2 g`. Its
backward carries a decorator added to save recording its graph, which also takes the second
derivative away. Download this page's script, fix ``Cube``, and run it:
:func:`double_backward.check` says whether you got it right.
"""

# %%
# The Function to fix
# -------------------
import torch
from torch.autograd.function import once_differentiable

import double_backward


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad_out


# %%
# The verdict
# -----------
x = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)
report = double_backward.check(Cube.apply, x)
print(report)

# %%
# With the decorator, ``grad_x`` is a lone node: backward ran in no-grad mode and recorded
# nothing.
from double_backward.graph import autograd_graph

x_leaf = x.clone().requires_grad_()
(grad_x,) = torch.autograd.grad(Cube.apply(x_leaf).sum(), x_leaf, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x_leaf},
    title="Graph of grad_x for Cube with once_differentiable",
)

# %%
# .. raw:: html
#
#    <details class="exercise-solution"><summary>The solution (open once you have tried)</summary>
#
# Remove ``@once_differentiable``. Backward records its graph only under
# ``create_graph=True`` anyway (the tutorial's second rule): without it, the decorator saved
# nothing.


class CubeFixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad_out


fixed = double_backward.check(CubeFixed.apply, x)
print(fixed)

# %%
# .. raw:: html
#
#    </details>
#
# Both verdicts, as the build measured them:
print(f"Cube:      ok = {report.ok}")
print(f"CubeFixed: ok = {fixed.ok}")
assert not report.ok and fixed.ok
