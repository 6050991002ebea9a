r"""
A gallery of failures
=====================

The Functions of patterns 1 to 6 are **wrong on purpose**. Each computes the right value and
the right first derivative, so ordinary tests pass; each breaks the second derivative. With a
plain incoming gradient most fail loudly, with an error. As soon as the incoming gradient
depends on the input, as it does after a smooth nonlinear op downstream, patterns 1 to 5
return a **wrong number and no error**; after a piecewise-linear op such as ReLU, the most
common layer, they return **exactly zero and no error**; pattern 6 is silent too when other
terms of the loss reach the input. Each is executed here, its symptom captured, and followed by
why it happens, the fix, and the page that teaches the fix; :func:`double_backward.check`
names each of them. Patterns 7 and 8 are a correct Function in the old style under
:mod:`torch.func`, and a PyTorch op without double backward.
"""

# %%
# How each pattern is put to the test
# -----------------------------------
# :func:`~double_backward.functions.failures.second_derivative` takes the second derivative of
# ``sinh`` or ``x**2`` at three points, in the four ways a reader meets it:
#
# - with a plain incoming gradient, ``fn(x).sum()``;
# - with one that requires grad, as :func:`~torch.autograd.gradgradcheck` passes;
# - with one that **depends on** ``x``, as after a smooth nonlinear op downstream: the loss
#   :math:`\tfrac12 \sum f(x)^2`, whose second derivative is :math:`f'^2 + f f''`;
# - **after a ReLU**: the loss :math:`\sum \mathrm{relu}(f(x))`, whose incoming gradient
#   :math:`[f(x) > 0]` depends on ``x`` through a step with derivative zero, and whose second
#   derivative is :math:`[f > 0]\, f''`.
#
# ``symptom`` prints each next to the native op's answer. SILENTLY ZERO is a wrong answer that
# is exactly zero. NO PATH TO x means the gradient has no path back to ``x`` at all: asked
# alone, :func:`torch.autograd.grad` then raises, but in a loss with other terms that reach
# ``x`` (any model has them) the Function's share silently counts as 0.
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: second_derivative
import torch

from double_backward import check
from double_backward.functions.failures import GRAD_OUTS, second_derivative

x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)


def symptom(fn, native):
    for grad_out in GRAD_OUTS:
        expected = second_derivative(native, x, grad_out)
        label = f"grad_out {grad_out}:"
        try:
            got = second_derivative(fn, x, grad_out, no_path_as_zero=False)
        except RuntimeError as error:
            print(f"{label:32} LOUD ERROR      RuntimeError: {error}")
            continue
        if got is None:
            answer = f"0 beside other terms, native {expected.numpy().round(3)}"
            print(f"{label:32} NO PATH TO x    {answer}")
            continue
        if torch.allclose(got, expected):
            verdict = "correct"
        elif not got.any():
            verdict = "SILENTLY ZERO"
        else:
            verdict = "SILENTLY WRONG"
        # + 0.0 prints a negative zero as 0.
        got, expected = got.numpy().round(3) + 0.0, expected.numpy().round(3) + 0.0
        print(f"{label:32} {verdict:15} {got}, native {expected}")
    print(
        "check() names:",
        ", ".join(sorted(check(fn, x).problem_names())) or "no problem",
    )


# %%
# 1. Intermediates stashed on ``ctx``
# -----------------------------------
# :class:`~double_backward.SinhBad` keeps :math:`\tfrac12 e^{\pm x}` as ``ctx`` attributes.
from double_backward import SinhBad

symptom(SinhBad.apply, torch.sinh)

# %%
# **Why:** forward runs in no-grad mode, so the intermediates have no history; ``grad_x`` is
# built from them and from ``grad_out`` only. When ``grad_out`` depends on ``x``, its path is
# the only one left: the term through :math:`\cosh x` is lost, and the answer is
# :math:`\cosh^2 x` instead of :math:`\cosh 2x`, with no error. After a ReLU, ``grad_out``
# is ReLU's 0/1 step, whose derivative is zero: the only path left gives exactly 0 instead of
# :math:`[\sinh x > 0] \sinh x`, again with no error. **Fix:** return them as extra
# outputs and save them with ``save_for_backward``:
# :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`.
#
# 2. ``save_for_backward`` on an intermediate that is not an output
# -----------------------------------------------------------------
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SinhSavesIntermediate
from double_backward.functions.failures import SinhSavesIntermediate

symptom(SinhSavesIntermediate.apply, torch.sinh)

# %%
# **Why:** ``save_for_backward`` keeps history only for inputs and outputs; an intermediate
# comes back just as it was made, without a ``grad_fn``. **Fix:** make it an output
# (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`), or recompute it in backward from
# the saved input.
#
# 3. Extra outputs marked non-differentiable
# ------------------------------------------
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SinhNonDifferentiableExtras
#
# The trap: it passes :func:`~torch.autograd.gradcheck` and fails only
# :func:`~torch.autograd.gradgradcheck`.
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.failures import SinhNonDifferentiableExtras

print(f"gradcheck passed: {gradcheck(SinhNonDifferentiableExtras.apply, (x,))}")
try:
    gradgradcheck(SinhNonDifferentiableExtras.apply, (x,))
except GradcheckError as error:
    print(f"gradgradcheck: GradcheckError: {str(error).splitlines()[0]}")
symptom(SinhNonDifferentiableExtras.apply, torch.sinh)

# %%
# **Why:** an output marked non-differentiable has no ``grad_fn``; saved, it comes back
# without history. **Fix:** do not mark outputs that backward differentiates through:
# :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`.
#
# 4. Gradients of the extra outputs dropped
# -----------------------------------------
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SinhDropsExtraGrads
#
# Used through a ``sinh``-style wrapper that keeps only the value, as a caller would:
from double_backward.functions.failures import sinh_drops_extra_grads

symptom(sinh_drops_extra_grads, torch.sinh)

# %%
# **Why:** ``grad_x`` does have a graph back to ``x``, through the extra outputs, so nothing
# errors. But the second backward arrives *at those outputs*, and a backward that ignores
# their gradients returns zero. **Fix:** add ``grad_half_exp_x * half_exp_x`` and
# ``- grad_half_exp_neg_x * half_exp_neg_x``, as :class:`~double_backward.Sinh` does:
# :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`.
#
# 5. Detaching inside backward
# ----------------------------
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SquareDetachesInBackward
from double_backward.functions.failures import SquareDetachesInBackward

symptom(SquareDetachesInBackward.apply, lambda t: t**2)

# %%
# **Why:** ``x.detach()`` is a tensor without history: it cuts the path from ``grad_x`` to
# ``x``. **Fix:** use the saved tensor as it is:
# :doc:`/auto_examples/tutorial/plot_01_saving_inputs`.
#
# 6. ``@once_differentiable``, asked with ``torch.autograd.grad``
# ----------------------------------------------------------------
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SquareOnceDifferentiable
#
# The decorator is meant to make the second derivative fail loudly. Asked with
# :func:`torch.autograd.grad`, its error never comes:
from double_backward.functions.failures import SquareOnceDifferentiable

symptom(SquareOnceDifferentiable.apply, lambda t: t**2)

# %%
# **Why:** the decorator's error node hangs off a detached copy of the result, not off ``x``:
# only a second ``.backward()``, which runs every node, reaches it. ``grad`` with respect to
# ``x`` never does: alone it raises autograd's own error (the gradient does not require grad,
# or ``x`` was not used), and beside other terms of the loss the Function's share is silently
# missing. **Fix:** write a differentiable backward; where you cannot, check that the
# second derivative raises in the way your code takes it
# (:doc:`/auto_examples/writing/plot_08_higher_orders` shows
# both ways).
#
# 7. The old style under ``torch.func``
# -------------------------------------
# A correct Function in the tutorial's ``forward(ctx, x)`` style, asked for a Hessian by
# :func:`torch.func.hessian`:
from double_backward import Square

try:
    torch.func.hessian(lambda t: Square.apply(t).sum())(x.detach())
except RuntimeError as error:
    print(f"LOUD ERROR  RuntimeError: {error}")

# %%
# **Why:** :mod:`torch.func` needs ``ctx`` to be filled outside ``forward``. **Fix:** the
# ``setup_context`` style, plus ``jvp`` for forward mode:
# :doc:`/auto_examples/writing/plot_06_modern_api`.
#
# 8. A built-in op without double backward
# -----------------------------------------
# Not every PyTorch operation has a differentiable backward. On CPU, without dropout,
# ``torch.nn.functional.scaled_dot_product_attention`` runs a fused kernel whose backward has
# no derivative of its own (torch 2.13): first order works, the second raises.
import torch.nn.functional as F

torch.manual_seed(0)
query = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
attention = F.scaled_dot_product_attention(query, query, query)
(grad_query,) = torch.autograd.grad(attention.sum(), query, create_graph=True)
print(f"first order: grad_query.grad_fn = {type(grad_query.grad_fn).__name__}")
try:
    torch.autograd.grad(grad_query.sum(), query)
except RuntimeError as error:
    print(f"LOUD ERROR  RuntimeError: {error}")

# %%
# The graph of ``grad_query``: its ``NotImplemented`` node stands for the derivative that the
# fused kernel's backward lacks.
from double_backward.graph import autograd_graph

attention = F.scaled_dot_product_attention(query, query, query)
(grad_query,) = torch.autograd.grad(attention.sum(), query, create_graph=True)
autograd_graph(
    {"grad_query": grad_query},
    {"query": query},
    title="Graph of grad_query through the fused attention kernel's backward",
)

# %%
# **Why:** the fused CPU kernel's backward is a single op with no derivative formula.
# **Fix:** where you need the second derivative, write attention with differentiable ops, or
# select PyTorch's composite "math" kernel; both pass
# :func:`~torch.autograd.gradgradcheck`, and they agree:
import math

from torch.nn.attention import SDPBackend, sdpa_kernel


def attention_by_hand(t):
    scores = t @ t.transpose(-2, -1) / math.sqrt(t.shape[-1])
    return torch.softmax(scores, dim=-1) @ t


def math_kernel_attention(t):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(t, t, t)


for fix in (attention_by_hand, math_kernel_attention):
    print(f"gradgradcheck({fix.__name__}) passed: {gradgradcheck(fix, (query,))}")
same = torch.allclose(attention_by_hand(query), math_kernel_attention(query))
print(f"same attention: {same}")

# %%
# Whether a model meets that kernel depends on how it calls attention. A
# ``torch.nn.TransformerEncoderLayer`` (torch 2.13, CPU) passes its attention dropout to
# ``F.scaled_dot_product_attention``; with dropout active, in train
# mode with the default ``dropout=0.1``, torch picks the composite MATH kernel and the second
# derivative works. With ``dropout=0``, or in eval mode, it picks the fused kernel and raises:
for dropout, train in ((0.1, True), (0.0, True), (0.1, False)):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=dropout, batch_first=True,
                                             dtype=torch.float64).train(train)
    tokens = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    (grad_tokens,) = torch.autograd.grad(layer(tokens).pow(2).sum(), tokens,
                                         create_graph=True)
    label = f"dropout={dropout}, {'train' if train else 'eval'} mode:"
    try:
        torch.autograd.grad(grad_tokens.pow(2).sum(), tokens)
        print(f"{label:28} second derivative computed")
    except RuntimeError as error:
        print(f"{label:28} LOUD ERROR  RuntimeError: {str(error).splitlines()[0]}")

# %%
# Attention is not the only one:
# :doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward` finds such
# built-ins inside a model with :func:`double_backward.check_model`, and the
# :doc:`table of built-ins </builtins>` lists every op that raises with the installed torch.

# %%
# What the checker says
# ---------------------
# The checker runs all of the above on your Function and explains each problem it finds, with
# a link to the fix. Here is its full report on pattern 4, silent even with a plain incoming
# gradient:
print(check(sinh_drops_extra_grads, x))

# %%
# Takeaway
# --------
# Only :func:`~torch.autograd.gradgradcheck` (or a second derivative compared with a known
# value) catches these. The :doc:`error-message index </errors>` lists the messages above and
# where each is explained. Next, when the op without a double backward is a built-in inside
# your model: :doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward`.
