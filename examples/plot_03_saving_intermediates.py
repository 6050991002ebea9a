r"""
Saving intermediate results
===========================

The tricky case: backward needs a tensor that forward computed along the way. For
:math:`\sinh x = \tfrac12 e^{x} - \tfrac12 e^{-x}`, the derivative
:math:`\cosh x = \tfrac12 e^{x} + \tfrac12 e^{-x}` reuses both exponentials, so it is tempting to
keep them from forward. But forward runs in no-grad mode: an intermediate has no history, and a
gradient computed from it cannot be differentiated again.

This page runs the fix, :class:`double_backward.Sinh`, and the mistake,
:class:`double_backward.SinhBad`, side by side, and shows the mistake's first derivative
right and its second derivative lost.
"""

# %%
# The fix: return the intermediates as outputs
# --------------------------------------------
# :class:`~double_backward.Sinh` returns the two intermediates as extra outputs, so autograd makes
# ``SinhBackward`` their ``grad_fn``, and saves them. Its backward must also pass on gradients that
# arrive at those extra outputs: there are none on the first backward, but the second backward sends
# the second derivative through them. :func:`~double_backward.sinh` keeps only the first output.
#
# Two details go beyond PyTorch's tutorial. The intermediates are the *halves* :math:`\tfrac12
# e^{\pm x}`, so the result overflows where :func:`torch.sinh` does rather than where
# :math:`e^x` does. And ``ctx.set_materialize_grads(False)`` makes backward receive ``None``,
# not zeros, for an output that got no gradient: ``0 * inf`` would turn an overflow into ``nan``.
#
# .. literalinclude:: /../src/double_backward/functions/saving_intermediates.py
#    :pyobject: Sinh
#
# .. literalinclude:: /../src/double_backward/functions/saving_intermediates.py
#    :pyobject: sinh
#
# First and second derivative at :math:`x = 0.5`
# ----------------------------------------------
import torch

from double_backward import sinh

# sphinx_gallery_thumbnail_number = 1
x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(sinh(x), x, create_graph=True)
(grad2_x,) = torch.autograd.grad(grad_x, x, retain_graph=True)
cosh_x, sinh_x = torch.cosh(x).item(), torch.sinh(x).item()
print(f"dy/dx   at x = 0.5: {grad_x.item():.6f}  (analytic cosh x = {cosh_x:.6f})")
print(f"d2y/dx2 at x = 0.5: {grad2_x.item():.6f}  (analytic sinh x = {sinh_x:.6f})")
torch.testing.assert_close(grad2_x, torch.sinh(x.detach()))

# %%
# The graph of ``grad_x``
# -----------------------
# ``grad_x`` is built from the saved intermediates, and they lead back to ``x`` through
# ``SinhBackward``. (Colours: :doc:`plot_00_grad_mode_rules`. ``retain_graph=True`` above kept
# the saved tensors this graph shows: :doc:`plot_09_graph_lifetime`.)
from double_backward.graph import autograd_graph

grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for Sinh: reaches x through SinhBackward",
)
grad_x_graph

# %%
# Checking it numerically
# -----------------------
from torch.autograd import gradcheck, gradgradcheck

torch.manual_seed(0)
inputs = (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),)
print(f"gradcheck(sinh)     passed: {gradcheck(sinh, inputs)}")
print(f"gradgradcheck(sinh) passed: {gradgradcheck(sinh, inputs)}")

# %%
# The mistake: intermediates kept on ``ctx`` (broken on purpose)
# ---------------------------------------------------------------
# :class:`~double_backward.SinhBad` is **broken, do not copy it**. It computes the same
# intermediates but keeps them as ``ctx`` attributes instead of returning them.
#
# .. literalinclude:: /../src/double_backward/functions/saving_intermediates.py
#    :pyobject: SinhBad
#
# Its first derivative is right
# -----------------------------
# The values in backward are correct, so the first derivative and
# :func:`~torch.autograd.gradcheck` are fine.
from double_backward import SinhBad

(bad_grad_x,) = torch.autograd.grad(SinhBad.apply(x), x, create_graph=True)
print(f"dy/dx at x = 0.5: {bad_grad_x.item():.6f}  (analytic cosh x = {cosh_x:.6f})")
print(f"gradcheck(SinhBad.apply) passed: {gradcheck(SinhBad.apply, inputs)}")

# %%
# But ``grad_x`` has no graph
# ---------------------------
# ``grad_x = grad_out * (half_exp_x + half_exp_neg_x)``, and none of the three tensors has any
# history: the result is a lone node, with no path back to ``x``.
print(
    f"grad_x.grad_fn: {bad_grad_x.grad_fn}, requires_grad: {bad_grad_x.requires_grad}"
)
bad_grad_x_graph = autograd_graph(
    {"grad_x": bad_grad_x},
    {"x": x},
    title="Graph of grad_x for SinhBad: a lone node, no path to x",
)
bad_grad_x_graph

# %%
# So the second derivative fails, loudly...
# -----------------------------------------
# Asked for the second derivative directly, autograd refuses: ``grad_x`` does not require grad.
try:
    torch.autograd.grad(bad_grad_x, x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# ... or silently
# ---------------
# When the incoming gradient itself requires grad (as in
# :func:`~torch.autograd.gradgradcheck`, or any chain where ``grad_out`` depends on other
# parameters), ``grad_x`` *does* get a graph, but only to ``grad_out``. The derivative with respect
# to ``x`` then comes out as zero instead of :math:`\sinh x`; with ``allow_unused=True`` nothing
# complains.
grad_out = torch.ones((), dtype=torch.float64, requires_grad=True)
(bad_grad_x,) = torch.autograd.grad(SinhBad.apply(x), x, grad_out, create_graph=True)
(bad_grad2_x,) = torch.autograd.grad(
    bad_grad_x, x, allow_unused=True, materialize_grads=True
)
print(f"d2y/dx2 at x = 0.5: {bad_grad2_x.item():.6f}  (analytic sinh x = {sinh_x:.6f})")

# %%
# :func:`~torch.autograd.gradgradcheck` catches it: the numerical second derivative is non-zero,
# the analytical one is all zeros.
from torch.autograd.gradcheck import GradcheckError

try:
    gradgradcheck(
        SinhBad.apply,
        (torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True),),
    )
except GradcheckError as error:
    print(f"GradcheckError: {error}")

# %%
# Takeaway
# --------
# Save only inputs and outputs. If backward needs an intermediate, either return it as an extra
# output (and handle its gradient in backward), as :class:`~double_backward.Sinh` does, or
# recompute it in backward from the saved inputs. Next, a backward that autograd cannot record at
# all: :doc:`plot_04_untracked_backward`.
