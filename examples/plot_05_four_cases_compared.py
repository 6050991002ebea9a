r"""
The four cases compared: is your backward tracked?
==================================================

The four previous pages each saved a different kind of tensor for backward. Whether double
backward works comes down to one question: can autograd record the computation in its backward,
all of it? This page runs every Function of the tutorial through the same checks and prints the
answer for each, before the modern API and the higher orders.
"""

# %%
# Every Function, the same checks
# -------------------------------
# For each Function: does ``grad_x`` (from ``create_graph=True``) have a graph back to ``x``
# (:func:`~double_backward.graph_walks.reaches` walks it), and does
# :func:`~torch.autograd.gradgradcheck` pass? A failing check is caught and reported, not
# hidden.
import torch
from torch.autograd import gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward import Cube, Exp, SinhBad, Square, sinh
from double_backward.graph_walks import reaches

FUNCTIONS = {
    "Square (saves its input)": Square.apply,
    "Exp (saves its output)": Exp.apply,
    "Sinh (intermediates as outputs)": sinh,
    "SinhBad (intermediates on ctx)": SinhBad.apply,
    "Cube (backward is a Function)": Cube.apply,
}


torch.manual_seed(0)
x = torch.randn(3, dtype=torch.float64, requires_grad=True)
print(f"{'Function':34} {'grad_x reaches x':17} gradgradcheck")
for name, fn in FUNCTIONS.items():
    (grad_x,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    try:
        verdict = "passed" if gradgradcheck(fn, (x,)) else "failed"
    except GradcheckError as error:
        verdict = "failed: " + str(error).split(" for ")[0]  # "Jacobian mismatch"
    print(f"{name:34} {'yes' if reaches(grad_x, x) else 'no':17} {verdict}")

# %%
# What to remember
# ----------------
# - Forward runs in no-grad mode; backward is recorded under ``create_graph=True``
#   (:doc:`plot_00_grad_mode_rules`).
# - Saving inputs (:doc:`plot_01_saving_inputs`) or outputs (:doc:`plot_02_saving_outputs`) with
#   :meth:`~torch.autograd.function.FunctionCtx.save_for_backward` keeps their history: double
#   backward works with nothing extra.
# - An intermediate has no history. Return it as an extra output and handle its gradient, or
#   recompute it in backward (:doc:`plot_03_saving_intermediates`).
# - A backward autograd cannot see becomes a Function with a backward of its own
#   (:doc:`plot_04_untracked_backward`).
# - A graph back to ``x`` is necessary, not sufficient: ``SinhBad``'s gradient reaches ``x``
#   through the incoming gradient when that gradient depends on ``x`` (any nonlinear op
#   downstream), and is then wrong without an error; behind a linear layer it has no path to
#   ``x``, and its share of the second derivative is silently missing
#   (:doc:`plot_03_saving_intermediates`).
# - Check every Function with :func:`~torch.autograd.gradcheck` *and*
#   :func:`~torch.autograd.gradgradcheck`, in float64: only the second catches a lost graph.
#
# Next, the ``setup_context`` style that :mod:`torch.func` needs, and the ``jvp`` that forward
# mode needs: :doc:`plot_06_modern_api`.
