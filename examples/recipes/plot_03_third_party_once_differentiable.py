r"""
A library's op that is differentiable once
==========================================

Many extension kernels (CUDA ops in detection, rendering and point-cloud libraries) mark
their backward ``@once_differentiable``, or compute it in a kernel autograd cannot see. A
gradient penalty or a Hessian-vector product through them raises, and their code is not
yours to edit. This page shows two ways around it: a Function of your own whose backward is
made of differentiable ops, and, where no such backward can be written, finite differences of
the library's own first derivative, with their error measured.
"""

# %%
# The library's op
# ----------------
# A stand-in for the library: softplus, :math:`\log(1 + e^x)`, with a backward written as a
# kernel would be, outside autograd, and marked ``@once_differentiable``.
import torch
from torch.autograd.function import once_differentiable

from double_backward.graph import autograd_graph


class LibrarySoftplus(torch.autograd.Function):
    """A third-party op: first-order backward only (as shipped, not to be edited)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * torch.sigmoid(x)


x = torch.linspace(-2, 2, 5, dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(LibrarySoftplus.apply(x).sum(), x, create_graph=True)
try:
    grad_x.sum().backward()
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# The gradient came back without a graph, so the message does not name the decorator. When
# the incoming gradient requires grad itself (as inside another backward), it does:
grad_out = torch.ones_like(x, requires_grad=True)
(grad_x,) = torch.autograd.grad(LibrarySoftplus.apply(x), x, grad_out, create_graph=True)
grad_x_graph = autograd_graph(  # drawn on the page
    {"grad_x": grad_x},
    {"x": x, "grad_out": grad_out},
    title="Graph of grad_x for the once-differentiable LibrarySoftplus",
)
try:
    grad_x.sum().backward()
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# Option 1: keep the kernel forward, write the backward with differentiable ops
# -----------------------------------------------------------------------------
# A Function of your own calls the library's forward (the fast kernel) and computes the
# derivative, :math:`\sigma(x)`, with torch ops on the saved input. Autograd records that
# backward, so it can be differentiated again. You need the op's derivative formula; for
# most ops it is in the paper or in the library's backward kernel.


class SoftplusTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return LibrarySoftplus.apply(x)  # the library's kernel, first order is all it needs

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * torch.sigmoid(x)  # recorded: differentiable again


print(f"gradcheck:     {torch.autograd.gradcheck(SoftplusTwice.apply, (x,))}")
print(f"gradgradcheck: {torch.autograd.gradgradcheck(SoftplusTwice.apply, (x,))}")

# %%
# Option 2: finite differences of the library's gradient
# ------------------------------------------------------
# When no differentiable backward can be written, the library's first derivative still
# works. A Hessian-vector product is the derivative of that gradient along :math:`v`, so a
# central difference of two gradients gives it:
# :math:`Hv \approx (\nabla f(x + hv) - \nabla f(x - hv)) / 2h`. Its error shrinks as
# :math:`h^2` until rounding takes over; trust it where two steps agree.


def library_grad(x):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(LibrarySoftplus.apply(x).sum(), x)[0]


def hvp_fd(x, v, h):
    return (library_grad(x + h * v) - library_grad(x - h * v)) / (2 * h)


v = torch.ones_like(x)
exact = torch.sigmoid(x) * (1 - torch.sigmoid(x)) * v  # softplus'' = sigma (1 - sigma)
for h in (1e-2, 5e-3, 1e-4, 5e-5):
    error = (hvp_fd(x, v, h) - exact).abs().max().item()
    print(f"h = {h:.0e}: largest error of Hv {error:.1e}")

# %%
# The differences cost two first-order backward passes per product and give a number, not a
# graph: use them for Hessian-vector products (Newton steps, curvature estimates), not for a
# penalty that must itself be differentiated. A gradient penalty needs option 1.
#
# Conclusion
# ----------
# A library's first-order backward cannot be differentiated again; the fix is a backward
# autograd can record. Wrap the library's forward in a Function whose backward is made of
# differentiable ops and check it with ``gradgradcheck``; where that is impossible, take
# finite differences of its gradient, with a step two steps agree on.
#
# Next: :doc:`plot_04_relu_hessian_is_zero`, where the second derivative exists and is zero.
