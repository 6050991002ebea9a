r"""
When backward is not tracked
============================

Sometimes backward cannot be written with torch operations at all: it calls NumPy, SciPy, or a
C++ extension. Autograd records none of that, so even with ``create_graph=True`` the gradient has
no graph. The fix is to wrap that computation in a custom Function of its own and give it a
backward by hand.

:class:`double_backward.Cube` computes :math:`y = x^3`; its backward,
:math:`\bar{x} = 3x^2\,\bar{y}`, runs in NumPy inside :class:`double_backward.CubeBackward`,
whose own backward supplies the second derivative.
"""

# %%
# Backward in NumPy, invisible to autograd
# ----------------------------------------
# ``cube_backward_numpy`` detaches its inputs, computes in NumPy, and converts back.
#
# .. literalinclude:: /../src/double_backward/functions/untracked_backward.py
#    :pyobject: cube_backward_numpy
#
# Grad mode is on and both inputs require grad, yet the result has no ``grad_fn``: a backward
# built on it could not be differentiated.
import torch

from double_backward.functions.untracked_backward import cube_backward_numpy

# sphinx_gallery_thumbnail_number = 1
x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
grad_out = torch.ones((), dtype=torch.float64, requires_grad=True)
untracked = cube_backward_numpy(grad_out, x)
print(f"value:   {untracked.item():.4f}  (analytic 3x^2 = {3 * 1.5**2:.4f})")
print(f"grad_fn: {untracked.grad_fn}")

# %%
# The fix: a Function for the backward
# ------------------------------------
# ``Cube.backward`` calls ``CubeBackward.apply`` instead of NumPy directly. Autograd cannot look
# inside ``CubeBackward.forward``, but it records the call, and ``CubeBackward.backward`` gives the
# derivatives of :math:`g = 3x^2\,\bar{y}` with respect to both of its inputs, :math:`\bar{y}` and
# :math:`x`, with differentiable torch operations (each only when that input requires grad; what
# that saves is measured in :doc:`/auto_examples/costs/plot_20c_fewer_kernels`).
#
# .. literalinclude:: /../src/double_backward/functions/untracked_backward.py
#    :pyobject: Cube
#
# .. literalinclude:: /../src/double_backward/functions/untracked_backward.py
#    :pyobject: CubeBackward
#
# First, second and third derivative at :math:`x = 1.5`
# -----------------------------------------------------
from double_backward import Cube

out = Cube.apply(x)
(grad_x,) = torch.autograd.grad(out, x, create_graph=True)
(grad2_x,) = torch.autograd.grad(grad_x, x, create_graph=True)
(grad3_x,) = torch.autograd.grad(grad2_x, x, retain_graph=True)
print(f"dy/dx     at x = 1.5: {grad_x.item():.4f}  (analytic 3x^2 = {3 * 1.5**2:.4f})")
print(f"d2y/dx2   at x = 1.5: {grad2_x.item():.4f}  (analytic 6x   = {6 * 1.5:.4f})")
print(f"d3y/dx3   at x = 1.5: {grad3_x.item():.4f}  (analytic 6)")
torch.testing.assert_close(grad2_x, 6 * x.detach())
torch.testing.assert_close(grad3_x, torch.tensor(6.0, dtype=torch.float64))

# %%
# The graph of ``grad_x``
# -----------------------
# ``grad_x`` is the output of ``CubeBackward``; its node ``CubeBackwardBackward`` keeps the saved
# ``grad_out`` and ``x`` and leads back to ``x``. (Colours:
# :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.
# ``retain_graph=True`` above kept the saved tensors it shows:
# :doc:`/auto_examples/writing/plot_09_graph_lifetime`.)
from double_backward.graph import autograd_graph

grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for Cube: CubeBackwardBackward reaches x",
)
grad_x_graph

# %%
# gradcheck and gradgradcheck
# ---------------------------
# Both Functions pass, :class:`~double_backward.CubeBackward` in each of its two inputs.
from torch.autograd import gradcheck, gradgradcheck

from double_backward import CubeBackward

torch.manual_seed(0)
inputs = (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),)
print(f"gradcheck(Cube.apply)             passed: {gradcheck(Cube.apply, inputs)}")
print(f"gradgradcheck(Cube.apply)         passed: {gradgradcheck(Cube.apply, inputs)}")
grad_out_and_x = tuple(
    torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in "gx"
)
first = gradcheck(CubeBackward.apply, grad_out_and_x)
second = gradgradcheck(CubeBackward.apply, grad_out_and_x)
print(f"gradcheck(CubeBackward.apply)     passed: {first}")
print(f"gradgradcheck(CubeBackward.apply) passed: {second}")

# %%
# Takeaway
# --------
# When backward leaves autograd, make it a Function and write its backward too. That backward is
# itself made of torch operations, so higher derivatives follow in reverse mode, as far as those
# operations' own formulas are right (:doc:`/auto_examples/writing/plot_08_higher_orders` measures
# how far). The four
# cases side by side: :doc:`/auto_examples/tutorial/plot_05_four_cases_compared`.
