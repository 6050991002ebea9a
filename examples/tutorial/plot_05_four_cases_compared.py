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
# ``SinhBad``'s row, drawn: its ``grad_x`` is a lone node, with no graph back to ``x``.
from double_backward.graph import autograd_graph

(grad_x,) = torch.autograd.grad(SinhBad.apply(x).sum(), x, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for SinhBad: a lone node, no graph back to x",
)

# %%
# The same Functions inside a loss
# --------------------------------
# ``gradgradcheck`` feeds backward an incoming gradient that does not depend on ``x``. In a
# model it usually does, and how a broken Function fails then depends on what follows it:
# after a smooth op (the loss :math:`\tfrac12 \sum f(x)^2`) ``SinhBad`` is wrong, after a
# piecewise-linear one (:math:`\sum \mathrm{relu}(f(x))`) it is exactly zero, and beside
# another term of the loss (:math:`\sum f(x) + \sum x^2`) its share is missing; none of
# them raises. Each second derivative against the native op's, by
# :func:`~double_backward.functions.failures.second_derivative` and plain autograd:
from double_backward.functions.failures import second_derivative

NATIVE = {
    "Square (saves its input)": lambda t: t**2,
    "Exp (saves its output)": torch.exp,
    "Sinh (intermediates as outputs)": torch.sinh,
    "SinhBad (intermediates on ctx)": torch.sinh,
    "Cube (backward is a Function)": lambda t: t**3,
}


def beside_x_squared(fn, at):
    at = at.detach().requires_grad_()
    (grad_at,) = torch.autograd.grad(
        fn(at).sum() + (at**2).sum(), at, create_graph=True
    )
    return torch.autograd.grad(grad_at.sum(), at)[0]


def verdict(got, expected):
    if torch.allclose(got, expected):
        return "right"
    return "ZERO, no error" if not got.any() else "WRONG, no error"


print(f"{'Function':34} {'½ Σ f(x)²':16} {'Σ relu(f(x))':16} Σ f(x) + Σ x²")
for name, fn in FUNCTIONS.items():
    cells = [
        verdict(
            second_derivative(fn, x, grad_out), second_derivative(NATIVE[name], x, grad_out)
        )
        for grad_out in ("depends on x", "after relu")
    ]
    cells.append(verdict(beside_x_squared(fn, x), beside_x_squared(NATIVE[name], x)))
    print(f"{name:34} {cells[0]:16} {cells[1]:16} {cells[2]}")

# %%
# What to remember
# ----------------
# - Forward runs in no-grad mode; backward is recorded under ``create_graph=True``
#   (:doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`).
# - Saving inputs (:doc:`/auto_examples/tutorial/plot_01_saving_inputs`) or outputs
#   (:doc:`/auto_examples/tutorial/plot_02_saving_outputs`) with
#   :meth:`~torch.autograd.function.FunctionCtx.save_for_backward` keeps their history: double
#   backward works with nothing extra.
# - An intermediate has no history. Return it as an extra output and handle its gradient, or
#   recompute it in backward (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`).
# - A backward autograd cannot see becomes a Function with a backward of its own
#   (:doc:`/auto_examples/tutorial/plot_04_untracked_backward`).
# - A graph back to ``x`` is necessary, not sufficient: ``SinhBad``'s gradient reaches ``x``
#   through the incoming gradient when that gradient depends on ``x``, and is then wrong
#   without an error after a smooth op downstream, and exactly zero without an error after a
#   piecewise-linear one (ReLU); behind a linear layer it has no path to ``x``, and its share
#   of the second derivative is silently missing
#   (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`).
# - Check every Function with :func:`~torch.autograd.gradcheck` *and*
#   :func:`~torch.autograd.gradgradcheck`, in float64: only the second catches a lost graph.
#
# Next, the ``setup_context`` style that :mod:`torch.func` needs, and the ``jvp`` that forward
# mode needs: :doc:`/auto_examples/writing/plot_06_modern_api`.
