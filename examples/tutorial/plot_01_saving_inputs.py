r"""
Saving the inputs
=================

The simplest case: backward needs an *input* of forward. :class:`double_backward.Square` computes
:math:`y = x^2` and saves :math:`x` with
:meth:`~torch.autograd.function.FunctionCtx.save_for_backward`. Double backward then works with
nothing extra to do, and this page shows why: the gradient's graph reaches back to ``x``.
"""

# %%
# The Function
# ------------
# Backward returns :math:`\bar{x} = 2x\,\bar{y}`. The saved ``x`` is the input itself, with its
# history, so when backward runs under ``create_graph=True`` autograd records ``grad_out * 2 * x``
# like any other computation.
#
# .. literalinclude:: /../src/double_backward/functions/saving_inputs.py
#    :pyobject: Square
#
# First and second derivative at :math:`x = 1.5`
# ----------------------------------------------
# :func:`torch.autograd.grad` with ``create_graph=True`` returns a ``grad_x`` that can itself be
# differentiated.
import torch

from double_backward import Square

# sphinx_gallery_thumbnail_number = 2
x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
out = Square.apply(x)
(grad_x,) = torch.autograd.grad(out, x, create_graph=True)
print(f"dy/dx at x = 1.5: {grad_x.item():.4f}  (analytic 2x = {2 * 1.5:.4f})")
print(f"grad_x.grad_fn:   {type(grad_x.grad_fn).__name__}")

# %%
# The graph of ``out``
# --------------------
# Forward left a single ``SquareBackward`` node. ``x`` is linked to it twice: by an arrow, as its
# input, and by a dashed line, as the tensor it saved. (Colours and lines:
# :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.)
from double_backward.graph import autograd_graph

out_graph = autograd_graph({"out": out}, {"x": x}, title="Graph of out = Square(x)")
out_graph

# %%
# The graph of ``grad_x``
# -----------------------
# Backward's ``grad_out * 2 * x`` was recorded. Here ``grad_out`` is the plain 1 that
# ``grad`` passes for a scalar ``out``; it does not require grad, so ``grad_out * 2`` leaves no
# node (in a composed loss it would, and the second backward would follow that path too). The
# multiplication by the saved ``x`` leaves a ``MulBackward0`` node with a path back to ``x``.
# That path is what the second backward follows.
grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for Square: a MulBackward0 node reaches x",
)
grad_x_graph

# %%
# The second derivative
# ---------------------
# Differentiating ``grad_x`` gives :math:`\frac{d^2y}{dx^2} = 2`.
(grad2_x,) = torch.autograd.grad(grad_x, x)
print(f"d2y/dx2 at x = 1.5: {grad2_x.item():.4f}  (analytic: 2)")
torch.testing.assert_close(grad2_x, torch.tensor(2.0, dtype=torch.float64))

# %%
# Checking it numerically
# -----------------------
# :func:`torch.autograd.gradcheck` compares backward with finite differences;
# :func:`torch.autograd.gradgradcheck` does the same for the backward of backward. Both raise on a
# mismatch, so reaching the print means they passed. Use float64: finite differences in float32
# are too coarse for their tolerances.
from torch.autograd import gradcheck, gradgradcheck

torch.manual_seed(0)
inputs = (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),)
print(f"gradcheck(Square.apply)     passed: {gradcheck(Square.apply, inputs)}")
print(f"gradgradcheck(Square.apply) passed: {gradgradcheck(Square.apply, inputs)}")

# %%
# In float32 the same correct Function fails (gradcheck also warns that its input is not
# float64):
import warnings

float32_inputs = (inputs[0].detach().float().requires_grad_(),)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    in_float32 = gradcheck(Square.apply, float32_inputs, raise_exception=False)
print(f"gradcheck(Square.apply) in float32 passed: {in_float32}")

# %%
# Takeaway
# --------
# An input saved for backward carries its own history, so a backward written with differentiable
# torch operations is differentiable again. Next:
# :doc:`/auto_examples/tutorial/plot_02_saving_outputs`.
