r"""
A backward that calls ``autograd.grad`` itself
==============================================

To save memory, some Functions keep only their input and, in backward, run forward again
under ``torch.enable_grad()`` and call ``torch.autograd.grad`` on it (hand-written
checkpointing, implicit layers, energy models). The first derivative is right; the second is
silently zero, and ``gradgradcheck`` fails. This page shows why, and the two changes that
make that backward differentiable.
"""

# %%
# The pattern, broken
# -------------------
# ``RecomputeBroken`` computes :math:`y = x \sin x`. Its backward recomputes forward on a
# detached copy of the input and differentiates it there.
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward.graph import autograd_graph


def f(x):
    return x * torch.sin(x)


class RecomputeBroken(torch.autograd.Function):
    """Broken for double backward: backward's gradient has no graph back to x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return f(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x_copy = x.detach().requires_grad_()  # a new leaf: no link to x
            y = f(x_copy)
        return torch.autograd.grad(y, x_copy, grad_out)[0]  # create_graph=False


x = torch.linspace(-1, 1, 4, dtype=torch.float64, requires_grad=True)
print(f"gradcheck: {gradcheck(RecomputeBroken.apply, (x,))}")
try:
    gradgradcheck(RecomputeBroken.apply, (x,))
except RuntimeError as error:
    print(f"{type(error).__name__}: {str(error).splitlines()[0]}")

# %%
# Why
# ---
# Two links are cut. ``x.detach()`` makes a leaf with no history, so the gradient does not
# depend on ``x`` as far as autograd knows. And ``autograd.grad`` without
# ``create_graph=True`` returns a plain tensor, which does not depend on ``grad_out``
# either. The second derivative through both is taken as zero:
grad_out = torch.ones_like(x, requires_grad=True)
(grad_x,) = torch.autograd.grad(RecomputeBroken.apply(x), x, grad_out, create_graph=True)
print(f"grad_x has a graph: {grad_x.grad_fn is not None}")

# %%
# The fix
# -------
# Recompute from ``x`` itself, which carries its history, and ask ``autograd.grad`` for a
# graph whenever the caller is building one: ``create_graph=torch.is_grad_enabled()``
# (autograd turns grad mode on in backward exactly when ``create_graph=True`` was asked
# for), so a plain backward still builds nothing extra.


class Recompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return f(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        create_graph = torch.is_grad_enabled()
        with torch.enable_grad():
            y = f(x)  # x, not a detached copy: the graph reaches the input
        return torch.autograd.grad(y, x, grad_out, create_graph=create_graph)[0]


print(f"gradcheck:     {gradcheck(Recompute.apply, (x,))}")
print(f"gradgradcheck: {gradgradcheck(Recompute.apply, (x,))}")

# %%
# Against the second derivative by hand, :math:`(x \sin x)'' = 2\cos x - x \sin x`:
(grad_x,) = torch.autograd.grad(Recompute.apply(x).sum(), x, create_graph=True)
grad_x_graph = autograd_graph(  # drawn on the page
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for Recompute, whose backward calls autograd.grad",
)
(second,) = torch.autograd.grad(grad_x.sum(), x)
expected = 2 * torch.cos(x) - x * torch.sin(x)
print(f"second derivative matches: {torch.allclose(second, expected.detach())}")

# %%
# Conclusion
# ----------
# A backward that calls ``autograd.grad`` is differentiable only if what it differentiates is
# connected to the saved input (no ``detach``) and it passes ``create_graph`` on. The
# :doc:`/errors` lists the message gradgradcheck prints here, under "gradgradcheck finds no
# second derivative".
#
# Next: :doc:`plot_06_grad_inside_checkpoint`, the same question inside
# ``torch.utils.checkpoint``.
