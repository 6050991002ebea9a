r"""
Exercise: a second derivative that raises nothing
=================================================

``Sin`` below saves its input, and its backward is the right formula,
:math:`g \cos x`. Double backward raises no error, and returns a wrong number: one line of
backward hides it from autograd, a failure from the failure gallery. Download this page's
script, fix ``Sin``, and run it: :func:`double_backward.check` says whether you got it right.
"""

# %%
# The Function to fix
# -------------------
import torch

import double_backward


class Sin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            return grad_out * torch.cos(x)


# %%
# No error, a wrong number
# ------------------------
# Take the loss :math:`x \sin x`, whose gradient depends on ``x`` twice: through
# :math:`\sin x` and through the incoming gradient. Its second derivative is
# :math:`2 \cos x - x \sin x`; plain ``torch.sin`` gives that, the buggy ``Sin`` another
# number, and no error.
from double_backward.graph import autograd_graph

x_leaf = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
for name, sin in (("torch.sin", torch.sin), ("Sin", Sin.apply)):
    (grad_x,) = torch.autograd.grad(sin(x_leaf) * x_leaf, x_leaf, create_graph=True)
    (second,) = torch.autograd.grad(grad_x, x_leaf)
    print(f"{name:9}: second derivative at 1 = {second.item():.6f}")
expected = 2 * torch.cos(x_leaf) - x_leaf * torch.sin(x_leaf)
print(f"2 cos 1 - sin 1 = {expected.item():.6f}")

# %%
# The graph of the buggy gradient (taken again: the second derivative above freed the first).
# It reaches ``x`` only through ``sin(x)``, the product rule's other term; the term backward
# computed, :math:`x \cos x`, is a constant in it.
(grad_x,) = torch.autograd.grad(Sin.apply(x_leaf) * x_leaf, x_leaf, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x_leaf},
    title="Graph of the gradient of x sin(x) with the buggy Sin: no path through cos",
)

# %%
# The verdict
# -----------
x = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)
report = double_backward.check(Sin.apply, x)
print(report)

# %%
# .. raw:: html
#
#    <details class="exercise-solution"><summary>The solution (open once you have tried)</summary>
#
# Drop ``torch.no_grad()``: backward already runs with grad mode on exactly when
# ``create_graph=True`` asks for a graph, and off otherwise.


class SinFixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * torch.cos(x)


fixed = double_backward.check(SinFixed.apply, x)
print(fixed)

# %%
# .. raw:: html
#
#    </details>
#
# Both verdicts, as the build measured them:
print(f"Sin:      ok = {report.ok}")
print(f"SinFixed: ok = {fixed.ok}")
assert not report.ok and fixed.ok
