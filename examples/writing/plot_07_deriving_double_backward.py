r"""
Deriving double backward for a non-elementwise op
=================================================

Every Function so far was elementwise. The ops people write by hand are not: a softmax, a
normalisation, a reduction with broadcasting. This page shows the one observation that makes
such a double backward derivable, and applies it to softmax.

The observation: backward is a function :math:`g(\bar{y}, x)` of two inputs, so its own
vector-Jacobian product has two parts. The next pages write softmax's double backward by hand
(:doc:`/auto_examples/writing/plot_07b_softmax_by_hand`) and derive LayerNorm's
(:doc:`/auto_examples/writing/plot_07c_layer_norm_trap`).
"""

# %%
# Backward is a function of two inputs
# ------------------------------------
# For :math:`y = f(x)` with Jacobian :math:`J(x)`, backward computes
#
# .. math:: \bar{x} = g(\bar{y}, x) = J(x)^\top \bar{y}.
#
# Double backward is the vector-Jacobian product of :math:`g` itself, for a cotangent :math:`v`
# (the gradient arriving at :math:`\bar{x}`). :math:`g` has two inputs, so it has two parts:
#
# .. math::
#
#    \frac{\partial \langle v, g\rangle}{\partial \bar{y}} = J(x)\,v,
#    \qquad
#    \frac{\partial \langle v, g\rangle}{\partial x}
#      = \frac{\partial}{\partial x}\langle \bar{y}, J(x)\,v \rangle
#      = \nabla^2 \langle \bar{y}, f\rangle(x)\; v .
#
# The first part is the forward-mode derivative (JVP) of :math:`f` in the direction :math:`v`:
# no new derivation, just the ``jvp`` of the forward. The second, the *mixed term*, is the
# Hessian of :math:`\langle\bar{y}, f\rangle` applied to :math:`v`, and is where the work is.
# A Hessian-vector product with a fixed :math:`\bar{y}` needs only the mixed term; a composed
# loss, whose :math:`\bar{y}` depends on :math:`x`, needs both.

# %%
# The first part is the JVP
# -------------------------
# Differentiate a native op's backward with respect to ``grad_out`` and compare the result with
# :func:`torch.func.jvp` (:math:`Jv`) and with the backward itself (:math:`J^\top v`). The
# first column is zero for every op. Softmax has a symmetric Jacobian, so both columns are zero
# for it; log-softmax and LayerNorm with a weight do not.
import torch
import torch.nn.functional as F

# sphinx_gallery_thumbnail_number = 1

torch.manual_seed(0)
x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
v = torch.randn(3, 5, dtype=torch.float64)
weight5 = torch.randn(5, dtype=torch.float64)
ops = {
    "softmax": lambda t: torch.softmax(t, -1),
    "log_softmax": lambda t: torch.log_softmax(t, -1),
    "layer_norm": lambda t: F.layer_norm(t, (5,), weight5),
}
print(f"{'':<12}{'max |part - Jv|':>17}{'max |part - J^T v|':>20}")
for name, op in ops.items():
    grad_out = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(op(x), x, grad_out, create_graph=True)
    (part,) = torch.autograd.grad(grad_x, grad_out, v)
    _, jv = torch.func.jvp(op, (x.detach(),), (v,))
    (jtv,) = torch.autograd.grad(op(x), x, v)
    print(f"{name:<12}{(part - jv).abs().max().item():>17.1e}"
          f"{(part - jtv).abs().max().item():>20.1e}")

# %%
# Softmax, worked out
# -------------------
# Along ``dim``, with :math:`\langle a, b\rangle` the sum over that dimension (one value per
# row, broadcast back), :math:`y = \operatorname{softmax}(x)` has
# :math:`J = \operatorname{diag}(y) - y y^\top`, so
#
# .. math:: \bar{x} = g(\bar{y}, y) = y \odot (\bar{y} - \langle \bar{y}, y\rangle).
#
# It needs only the output :math:`y`, which can be saved: an output is tracked (case 2,
# :doc:`/auto_examples/tutorial/plot_02_saving_outputs`). Writing :math:`g` in terms of :math:`y`,
# its two parts are
#
# .. math::
#
#    \frac{\partial \langle v, g\rangle}{\partial \bar{y}} = y \odot (v - \langle v, y\rangle),
#    \qquad
#    \frac{\partial \langle v, g\rangle}{\partial y}
#      = v \odot (\bar{y} - \langle \bar{y}, y\rangle) - \langle v, y\rangle\, \bar{y}.
#
# :math:`J` is symmetric, so the first part, the JVP, is the same formula as backward. The
# second reaches :math:`x` through :math:`y`'s own ``grad_fn``: the softmax's backward again.

# %%
# Version 1: backward in differentiable ops
# -----------------------------------------
# Write :math:`g` with torch ops on saved tensors that autograd tracks, and autograd derives
# both parts in reverse mode. It goes as far as the native ops' own formulas go (the next page
# checks the third order). Nothing else to write:
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: softmax_vjp
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: Softmax
#
# Its ``grad_x`` is a graph of ``mul``, ``sum`` and ``sub`` on the saved ``y``, which leads back
# to ``x`` through ``SoftmaxBackward``. (Colours:
# :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.)
from double_backward.functions.softmax import softmax
from double_backward.graph import autograd_graph

x_small = torch.randn(4, dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(
    softmax(x_small, 0), x_small, torch.randn(4, dtype=torch.float64), create_graph=True
)
autograd_graph({"grad_x": grad_x}, {"x": x_small},
               title="grad_x of Softmax: torch ops on y, which leads back to x")

# %%

# %%
# Next
# ----
# Autograd derived both parts of softmax's double backward from a backward written in torch
# ops. When backward must be one Function of its own, you write both parts by hand:
# :doc:`/auto_examples/writing/plot_07b_softmax_by_hand`.
