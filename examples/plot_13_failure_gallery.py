r"""
A gallery of failures
=====================

Every pattern on this page is **wrong on purpose**. Each computes the right value and the
right first derivative, so ordinary tests pass; each breaks the second derivative. Some break
it loudly (an error), some silently (a wrong number, no warning). Each is executed here, its
symptom captured, and followed by why it happens, the fix, and the page that teaches the fix.
:func:`double_backward.check` names every one of them.
"""

# %%
# How each pattern is put to the test
# -----------------------------------
# ``symptom`` computes the first derivative of ``sinh`` or ``x**2`` at three points, then asks
# for the second derivative twice: with a plain incoming gradient (as
# :func:`torch.autograd.grad` on a loss does), and with an incoming gradient that itself
# requires grad (as in a gradient penalty or :func:`~torch.autograd.gradgradcheck`). The answer
# is compared with the native op's; a failing comparison is labelled "silently wrong".
import torch

from double_backward import check

x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)


def value(output):
    return output[0] if isinstance(output, tuple) else output  # Sinh-like Functions


def second_derivative(fn, grad_out):
    (grad_x,) = torch.autograd.grad(value(fn(x)), x, grad_out, create_graph=True)
    (second,) = torch.autograd.grad(
        grad_x.sum(), x, allow_unused=True, materialize_grads=True
    )
    return second


def symptom(fn, native):
    expected = second_derivative(native, torch.ones_like(x))
    for label, grad_out in [
        ("plain grad_out", torch.ones_like(x)),
        ("grad_out requiring grad", torch.ones_like(x, requires_grad=True)),
    ]:
        try:
            second = second_derivative(fn, grad_out)
        except RuntimeError as error:
            print(f"{label:24} LOUD ERROR      RuntimeError: {error}")
            continue
        verdict = "correct" if torch.allclose(second, expected) else "SILENTLY WRONG"
        got, want = second.numpy().round(4), expected.numpy().round(4)
        print(f"{label:24} {verdict:15} d2y/dx2 = {got}, expected {want}")
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
# built from them and from ``grad_out`` only. **Fix:** return them as extra outputs and save
# them with ``save_for_backward``: :doc:`plot_03_saving_intermediates`.
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
# (:doc:`plot_03_saving_intermediates`), or recompute it in backward from the saved input.
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
# :doc:`plot_03_saving_intermediates`.
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
# :doc:`plot_03_saving_intermediates`.
#
# 5. Detaching inside backward
# ----------------------------
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SquareDetachesInBackward
from double_backward.functions.failures import SquareDetachesInBackward

symptom(SquareDetachesInBackward.apply, lambda t: t**2)

# %%
# **Why:** ``x.detach()`` is a tensor without history: it cuts the path from ``grad_x`` to
# ``x``. **Fix:** use the saved tensor as it is: :doc:`plot_01_saving_inputs`.
#
# 6. The old style under ``torch.func``
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
# ``setup_context`` style, plus ``jvp`` for forward mode: :doc:`plot_06_modern_api`.
#
# What the checker says
# ---------------------
# The checker runs all of the above on your Function and explains each problem it finds, with
# a link to the fix. Here is its full report on pattern 4, the silent one:
print(check(sinh_drops_extra_grads, x))

# %%
# Takeaway
# --------
# Only :func:`~torch.autograd.gradgradcheck` (or a second derivative compared with a known
# value) catches these. The :doc:`error-message index </errors>` lists the messages above and
# where each is explained. Next, what double backward is for: :doc:`plot_15_applications`.
