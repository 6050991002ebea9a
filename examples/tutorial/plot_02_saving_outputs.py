r"""
Saving the outputs
==================

A slight variation: backward needs an *output* of forward. :class:`double_backward.Exp` computes
:math:`y = e^x`, whose derivative is :math:`e^x` again, so it saves its result instead of
recomputing it. Outputs are tracked just like inputs, so double backward works here too.
"""

# %%
# The Function
# ------------
# Backward returns :math:`\bar{x} = y\,\bar{y}`. When forward returns, autograd makes
# ``ExpBackward`` the ``grad_fn`` of the output; the saved ``result`` is unpacked in backward with
# that history.
#
# .. literalinclude:: /../src/double_backward/functions/saving_outputs.py
#    :pyobject: Exp
#
# First derivative at :math:`x = 0.5`
# -----------------------------------
import torch

from double_backward import Exp

# sphinx_gallery_thumbnail_number = 1
x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
out = Exp.apply(x)
(grad_x,) = torch.autograd.grad(out, x, create_graph=True)
exp_x = torch.exp(x).item()
print(f"dy/dx at x = 0.5: {grad_x.item():.6f}  (analytic e^x = {exp_x:.6f})")

# %%
# The graph of ``grad_x``
# -----------------------
# ``grad_x = grad_out * result``: the ``MulBackward0`` node reaches ``x`` through ``ExpBackward``,
# the ``grad_fn`` of the saved output. (Colours:
# :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.)
from double_backward.graph import autograd_graph

grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for Exp: reaches x through ExpBackward",
)
grad_x_graph

# %%
# The second derivative
# ---------------------
# The second backward goes through ``ExpBackward`` once more: :math:`\frac{d^2y}{dx^2} = e^x`.
(grad2_x,) = torch.autograd.grad(grad_x, x)
print(f"d2y/dx2 at x = 0.5: {grad2_x.item():.6f}  (analytic e^x = {exp_x:.6f})")
torch.testing.assert_close(grad2_x, torch.exp(x.detach()))

# %%
# gradcheck and gradgradcheck
# ---------------------------
# Both pass (what each compares: :doc:`/auto_examples/tutorial/plot_01_saving_inputs`).
from torch.autograd import gradcheck, gradgradcheck

torch.manual_seed(0)
inputs = (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),)
print(f"gradcheck(Exp.apply)     passed: {gradcheck(Exp.apply, inputs)}")
print(f"gradgradcheck(Exp.apply) passed: {gradgradcheck(Exp.apply, inputs)}")

# %%
# Takeaway
# --------
# Inputs and outputs are the two kinds of tensor autograd already tracks; saving either is safe for
# double backward. Intermediate results are not:
# :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`.
