r"""
The two grad-mode rules of custom Functions
===========================================

Whether a custom :class:`torch.autograd.Function` supports double backward follows from two rules
about what autograd records:

1. **Forward is not recorded.** It runs in no-grad mode, and when it returns, the Function's
   backward node becomes the ``grad_fn`` of each output autograd tracks (not of an output
   marked non-differentiable, nor of any output when no input requires grad or grad mode is
   off).
2. **Backward is recorded only when** ``create_graph=True``, when you differentiate with
   :func:`torch.autograd.grad` or ``.backward()``. Then its operations build a graph, so the
   gradient it returns can be differentiated again.

This page shows both rules with a probe Function that notes the grad mode it runs in.
"""

# %%
# A probe Function
# ----------------
# ``Probe`` squares its input and notes :func:`torch.is_grad_enabled` in forward and in
# backward. It exists only to watch the rules at work; the next page explains the Function proper.
import torch


class Probe(torch.autograd.Function):
    """y = x**2, recording the grad mode that forward and backward each run in."""

    grad_mode_seen: dict[str, bool] = {}

    @staticmethod
    def forward(ctx, x):
        Probe.grad_mode_seen["forward"] = torch.is_grad_enabled()
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad_out):
        Probe.grad_mode_seen["backward"] = torch.is_grad_enabled()
        (x,) = ctx.saved_tensors
        return grad_out * 2 * x


# %%
# Rule 1: forward runs in no-grad mode
# ------------------------------------
# Grad mode is on outside, yet forward sees it off: the ``x**2`` inside leaves no
# ``PowBackward0`` node. The output's ``grad_fn`` is the Function's own backward node, which leads
# straight to ``x``.
x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
out = Probe.apply(x)

print(f"grad mode outside forward:  {torch.is_grad_enabled()}")
print(f"grad mode inside forward:   {Probe.grad_mode_seen['forward']}")
print(f"out.grad_fn:                {type(out.grad_fn).__name__}")
next_nodes = [type(node).__name__ for node, _ in out.grad_fn.next_functions]
print(f"out.grad_fn.next_functions: {next_nodes}  (the AccumulateGrad node of x)")

# %%
# Outputs that get no ``grad_fn``
# -------------------------------
# An output marked with ``ctx.mark_non_differentiable`` is not tracked, and when no input
# requires grad, or grad mode is off around the call, there is nothing to track at all.
# ``SinhNonDifferentiableExtras`` (from the failure gallery) returns three outputs and marks the
# last two:
from double_backward.functions.failures import SinhNonDifferentiableExtras


def grad_fns(outputs):
    return [type(o.grad_fn).__name__ if o.grad_fn else None for o in outputs]


print(f"x requires grad:         {grad_fns(SinhNonDifferentiableExtras.apply(x))}")
print(
    f"x does not require grad: {grad_fns(SinhNonDifferentiableExtras.apply(x.detach()))}"
)
with torch.no_grad():
    print(f"under torch.no_grad():   {grad_fns(SinhNonDifferentiableExtras.apply(x))}")

# %%
# Reading the graphs
# ------------------
# Every graph on this site is drawn by :func:`double_backward.graph.autograd_graph`, with these
# colours and lines. Arrows point from inputs towards the tensor being drawn; a dashed line links
# a tensor a custom Function saved to the Function's backward node.
from double_backward.graph import autograd_graph, graph_legend

legend = graph_legend()
legend

# %%
# The graph of ``out`` has one backward node: everything forward did is hidden inside
# ``ProbeBackward``.
out_graph = autograd_graph(
    {"out": out}, {"x": x}, title="Graph of out = Probe(x): one ProbeBackward node"
)
out_graph

# %%
# Rule 2: backward is recorded only with ``create_graph=True``
# ------------------------------------------------------------
# Without it, backward runs in no-grad mode and the returned gradient is a plain tensor. With it,
# backward runs in grad mode and the gradient has a ``grad_fn`` of its own.
for create_graph in (False, True):
    (grad_x,) = torch.autograd.grad(Probe.apply(x), x, create_graph=create_graph)
    seen = Probe.grad_mode_seen["backward"]
    print(
        f"create_graph={create_graph!s:5}: grad mode in backward = {seen!s:5}, "
        f"grad_x.grad_fn = {type(grad_x.grad_fn).__name__}"
    )

# %%
# What the two rules mean together
# --------------------------------
# With ``create_graph=True`` the gradient has a graph when the tensors backward computes it
# from are tracked. It is *right* only when it depends on the input through tracked tensors by
# the right formula: a gradient whose only path to ``x`` is the incoming gradient has a graph
# too, and is silently wrong (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`). Here
# ``grad_x = grad_out * 2 * x`` uses the saved input ``x``, so the second derivative comes out
# right: :math:`\frac{d^2}{dx^2} x^2 = 2`.
(grad_x,) = torch.autograd.grad(Probe.apply(x), x, create_graph=True)
(second,) = torch.autograd.grad(grad_x, x)
print(f"d2y/dx2 of y = x**2 at x = 1.5: {second.item():.4f}  (analytic: 2)")

# %%
# The next pages apply the rules to each place a tensor needed in backward can come from: an
# input, an output, an intermediate result of forward, or code autograd cannot see at all.
