r"""
Check your own Function
=======================

:func:`double_backward.check` tells whether a custom Function supports double backward, and
when it does not, why. This page runs it on Functions like the ones real projects write: a
ReLU, a bilinear matmul, a loss with an integer target, a view, and three broken ones. Each
report is printed in full, so you see what a verdict and a diagnosis look like.

The verdict comes from evidence: a problem is reported only when a check was seen to fail
(:func:`~torch.autograd.gradcheck`, :func:`~torch.autograd.gradgradcheck` with an incoming
gradient that requires grad, forward mode against reverse mode), at two points. The graph is
read only to name the cause of a failure.
"""

# %%
# A ReLU: a zero second derivative is an answer
# ---------------------------------------------
# PyTorch's own first example of a custom Function is a ReLU whose backward multiplies by the
# mask ``x > 0``. Its gradient has no graph back to ``x``: that is right, since the second
# derivative of a piecewise-linear function is zero. The report says so in a note.
import torch

from double_backward import check


class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * (x > 0)


torch.manual_seed(0)
print(check(MyReLU.apply, torch.randn(4, 3)))

# %%
# A bilinear Function with two inputs of different shapes
# -------------------------------------------------------
# A matmul saves both operands. Its second derivative is *mixed* only
# (:math:`\partial^2 (AB) / \partial A\,\partial B \neq 0`): gradgradcheck differentiates
# through the incoming gradient too, so the mixed terms are checked.


class MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved_tensors
        return grad_out @ b.T, a.T @ grad_out


print(check(MatMul.apply, torch.randn(4, 3), torch.randn(3, 2)))

# %%
# A loss with an integer target and class weights
# -----------------------------------------------
# Pass the arguments as the Function takes them. Integer tensors (the target) are never
# differentiated; ``wrt=(0,)`` says that only the logits are, so the float class weights are
# passed as constants.


class WeightedBCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, weight):
        ctx.save_for_backward(logits, target, weight)
        return weight * (torch.nn.functional.softplus(logits) - logits * target)

    @staticmethod
    def backward(ctx, grad_out):
        logits, target, weight = ctx.saved_tensors
        return grad_out * weight * (torch.sigmoid(logits) - target), None, None


logits, target, weight = torch.randn(4, 3), torch.randint(0, 2, (4, 3)), torch.rand(3)
print(check(WeightedBCE.apply, logits, target, weight, wrt=(0,)))

# %%
# A view, and an output that is not a tensor to differentiate
# -----------------------------------------------------------
# Forward may return a view of its input, and extra outputs such as integer indices; those
# are left out of the checks, with a note.


class FlattenAndArgmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        indices = x.argmax(-1)
        ctx.mark_non_differentiable(indices)
        return x.view(-1), indices

    @staticmethod
    def backward(ctx, grad_out, _grad_indices):
        return grad_out.view(ctx.shape)


print(check(FlattenAndArgmax.apply, torch.randn(2, 3)))

# %%
# BROKEN: an intermediate kept on ``ctx``
# ---------------------------------------
# This Swish keeps ``sigmoid(x)`` as a ``ctx`` attribute. Forward runs in no-grad mode, so the
# attribute has no history, and gradgradcheck fails. The diagnosis names the tensor, where it
# was kept, its dtype and shape.


class SwishStashed(torch.autograd.Function):  # BROKEN on purpose
    @staticmethod
    def forward(ctx, x):
        ctx.sig = torch.sigmoid(x)  # the mistake
        ctx.save_for_backward(x)
        return x * ctx.sig

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * ctx.sig * (1 + x * (1 - ctx.sig))


print(check(SwishStashed.apply, torch.randn(4, 3)))

# %%
# BROKEN: ``@once_differentiable`` behind a lambda
# ------------------------------------------------
# Detection libraries mark a kernel's backward ``@once_differentiable``, then wrap the call.
# The checker finds the decorator on the graph's node, so the wrapper does not hide it.
from torch.autograd.function import once_differentiable


class SquareKernel(torch.autograd.Function):  # first-order only, on purpose
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return scale * x**2

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * 2 * ctx.scale * x, None


print(check(lambda x: SquareKernel.apply(x, 0.5), torch.randn(4)))

# %%
# BROKEN: the Function itself raises
# ----------------------------------
# An error raised by the Function is reported as that, with its message, not as a wrong
# derivative. Here the call forgets the ``scale`` argument.
print(check(SquareKernel.apply, torch.randn(4)))

# %%
# In your test suite
# ------------------
# :func:`double_backward.testing.assert_supports_double_backward` raises ``AssertionError``
# carrying the report, so a pytest test is one line. Here the broken Swish fails it:
from double_backward.testing import assert_supports_double_backward


def test_swish_supports_double_backward():
    assert_supports_double_backward(SwishStashed.apply, torch.randn(4, 3))


try:
    test_swish_supports_double_backward()
except AssertionError as error:
    print(f"AssertionError: {error}")

# %%
# From the command line
# ---------------------
# ``python -m double_backward.checker module:Function`` checks a Function on random inputs:
# ``--shape`` for each input, ``--domain positive`` or ``--range low,high`` for where they lie,
# ``--arg`` and ``--kwarg name=value`` for extra arguments, ``--json`` for CI. It exits 0 when
# no problem is found, 1 when one is, 2 for a usage error or a Function that cannot be called.
# The same, run in this page on the tutorial's broken ``SinhBad``:
from double_backward.checker import main

status = main(["double_backward:SinhBad", "--shape", "2,3", "--domain", "positive"])
print(f"exit status: {status}")

# %%
# Conclusion
# ----------
# Trust a problem the checker reports: a check failed, and the diagnosis says which tensor is
# the likely cause and which page shows the fix. Read its notes too: they name patterns that
# did not break anything at these inputs. Next: the :doc:`failure gallery
# <plot_13_failure_gallery>` shows each broken pattern's symptom, and :doc:`plot_06_modern_api`
# what :mod:`torch.func` needs.
