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
right and its second derivative lost, wrong without an error, or exactly zero without an
error, depending on what follows it in the loss.
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
# e^{\pm x}`, so the result overflows where :math:`\sinh x` leaves the dtype's range rather
# than :math:`\ln 2` earlier, where :math:`e^x` does (shown below). And
# ``ctx.set_materialize_grads(False)`` makes backward receive ``None``, not zeros, for an
# output that got no gradient: ``0 * inf`` would turn an overflow into ``nan``. That holds in
# eager mode; ``torch.compile`` materialises the zeros anyway, and the ``nan`` comes back
# (run in :doc:`/auto_examples/beyond_python/plot_19_torch_compile`).
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
# Where it overflows
# ------------------
# In float32, :math:`\sinh x` exceeds the largest float from :math:`x = 89.416`, and
# :math:`e^x` from :math:`88.723`. At :math:`x = 89` the package's ``sinh`` is finite.
# :func:`torch.sinh` gives the same on a short tensor, but on a long one its vectorised CPU
# kernel goes through :math:`e^x` and overflows early:
near_overflow = torch.tensor([89.0])
long_tensor = torch.full((64,), 89.0)
print(f"sinh(89), package:              {sinh(near_overflow).item():.4g}")
print(f"torch.sinh(89), 1 element:      {torch.sinh(near_overflow).item():.4g}")
print(f"torch.sinh(89), 64 elements:    {torch.sinh(long_tensor)[0].item():.4g}")

# %%
# The graph of ``grad_x``
# -----------------------
# ``grad_x`` is built from the saved intermediates, and they lead back to ``x`` through
# ``SinhBackward``. (Colours: :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.
# ``retain_graph=True`` above kept
# the saved tensors this graph shows: :doc:`/auto_examples/writing/plot_09_graph_lifetime`.)
from double_backward.graph import autograd_graph

grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for Sinh: reaches x through SinhBackward",
)
grad_x_graph

# %%
# gradcheck and gradgradcheck
# ---------------------------
# Both pass (what each compares: :doc:`/auto_examples/tutorial/plot_01_saving_inputs`).
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
# Asked for the second derivative of ``SinhBad.apply(x)`` alone, autograd refuses: ``grad_x``
# does not require grad.
try:
    torch.autograd.grad(bad_grad_x, x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# ... or, in a real loss, silently wrong
# --------------------------------------
# A loss rarely ends at ``SinhBad``. After a smooth nonlinear op downstream, the incoming
# gradient depends on ``x``: for :math:`L = \tfrac12 \sum \sinh^2 x` it is :math:`\sinh x`. Then
# ``grad_x = grad_out * cosh`` *does* reach ``x``, through ``grad_out``, and no error is
# raised. But the path through the cosh factor is missing: the second derivative comes out as
# :math:`\cosh^2 x` instead of :math:`\cosh 2x`. Against native autograd:
xs = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)


def composed_second_derivative(sinh_fn):
    loss = (sinh_fn(xs) ** 2).sum() / 2
    (grad_xs,) = torch.autograd.grad(loss, xs, create_graph=True)
    return torch.autograd.grad(grad_xs.sum(), xs)[0]


print(f"SinhBad:    {composed_second_derivative(SinhBad.apply).numpy().round(3)}")
print(f"Sinh (fix): {composed_second_derivative(sinh).numpy().round(3)}")
print(f"torch.sinh: {composed_second_derivative(torch.sinh).numpy().round(3)}")
cosh_squared, cosh_2x = torch.cosh(xs.detach()) ** 2, torch.cosh(2 * xs.detach())
print(
    f"cosh^2 x:   {cosh_squared.numpy().round(3)}  cosh 2x: {cosh_2x.numpy().round(3)}"
)

# %%
# ... or silently zero, after a ReLU
# ----------------------------------
# The most common op after a layer is piecewise linear: ReLU, max-pooling, a clamp. Its
# incoming gradient is a 0/1 step, :math:`[\sinh x > 0]`, which depends on ``x`` but whose
# derivative is zero. ``grad_x = grad_out * cosh`` reaches ``x`` only through that step, so
# the second derivative comes out as exactly 0, with no error, where it should be
# :math:`[\sinh x > 0] \sinh x`. The same in a small network, ``SinhBad``, then
# ``Linear -> ReLU -> Linear``:
torch.manual_seed(0)
network = torch.nn.Sequential(
    torch.nn.Linear(1, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)
).double()


def network_after(t):
    return network(t.unsqueeze(-1)).squeeze(-1)


def second_derivative_through(downstream, sinh_fn):
    (grad_xs,) = torch.autograd.grad(
        downstream(sinh_fn(xs)).sum(), xs, create_graph=True
    )
    return torch.autograd.grad(grad_xs.sum(), xs)[0].numpy().round(3) + 0.0


for label, downstream in (("relu(sinh x)", torch.relu), ("network(sinh x)", network_after)):
    for name, sinh_fn in (("SinhBad", SinhBad.apply), ("Sinh (fix)", sinh),
                          ("torch.sinh", torch.sinh)):
        print(f"{label:16} {name:11} {second_derivative_through(downstream, sinh_fn)}")

# %%
# When the incoming gradient requires grad but does not depend on ``x`` (as in
# :func:`~torch.autograd.gradgradcheck`, or behind a linear layer, whose incoming gradient is
# its weight), ``grad_x`` has no path back to ``x`` at all. How that shows depends on the
# call: ``grad`` raises, ``grad`` with ``allow_unused=True`` returns ``None``, ``.backward()``
# leaves ``x.grad`` as ``None`` without a word, and when other terms of the loss reach ``x``,
# SinhBad's share of the second derivative is silently missing.
weight = torch.ones((), dtype=torch.float64, requires_grad=True)


def bad_grad_x(loss_of):
    return torch.autograd.grad(loss_of(x), x, create_graph=True)[0]


def linear(t):
    return weight * SinhBad.apply(t)


try:
    torch.autograd.grad(bad_grad_x(linear), x)
except RuntimeError as error:
    print(f"grad:              RuntimeError: {error}")
print(f"allow_unused=True: {torch.autograd.grad(bad_grad_x(linear), x, allow_unused=True)}")
x.grad = None
bad_grad_x(linear).backward()
print(f".backward():       x.grad = {x.grad}")
# With another term, x**3: the second derivative should be sinh x + 6x.
(beside,) = torch.autograd.grad(bad_grad_x(lambda t: linear(t) + t**3), x)
print(f"beside x**3:       {beside.item():.6f}  (right: {sinh_x + 6 * x.item():.6f})")

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
# all: :doc:`/auto_examples/tutorial/plot_04_untracked_backward`.
