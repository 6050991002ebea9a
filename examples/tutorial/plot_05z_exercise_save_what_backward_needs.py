r"""
Exercise: save what backward needs
==================================

``Softplus`` below computes :math:`\log(1 + e^x)`, and its backward multiplies the incoming
gradient by the derivative, :math:`\sigma(x)`. Its first derivative is right, and its second
derivative is wrong: it saves a tensor the way the tutorial warned against. Download this
page's script, fix ``Softplus``, and run it: :func:`double_backward.check` says whether you got
it right.
"""

# %%
# The Function to fix
# -------------------
# Forward computes :math:`\sigma(x)` anyway, so it keeps it for backward.
import torch

import double_backward


class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.sigmoid = torch.sigmoid(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * ctx.sigmoid


# %%
# The verdict
# -----------
# The check runs gradcheck and gradgradcheck in float64 and names the cause of what fails.
x = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)
report = double_backward.check(Softplus.apply, x)
print(report)

# %%
# The gradient's graph shows the bug: ``grad_x`` has none, it is a lone node. ``ctx.sigmoid``
# was made in forward's no-grad mode, and the incoming gradient of ``.sum()`` is a constant.
from double_backward.graph import autograd_graph

x_leaf = x.clone().requires_grad_()
(grad_x,) = torch.autograd.grad(Softplus.apply(x_leaf).sum(), x_leaf, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x_leaf},
    title="Graph of grad_x for the buggy Softplus: a lone node, no graph",
)

# %%
# .. raw:: html
#
#    <details class="exercise-solution"><summary>The solution (open once you have tried)</summary>
#
# Save the *input* with ``save_for_backward`` and recompute :math:`\sigma(x)` in backward,
# where ``create_graph=True`` records it; or return it as an extra output, as ``Sinh`` does.


class SoftplusFixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * torch.sigmoid(x)


fixed = double_backward.check(SoftplusFixed.apply, x)
print(fixed)

# %%
# .. raw:: html
#
#    </details>
#
# Both verdicts, as the build measured them:
print(f"Softplus:      ok = {report.ok}")
print(f"SoftplusFixed: ok = {fixed.ok}")
assert not report.ok and fixed.ok
