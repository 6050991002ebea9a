r"""
Check your own Function
=======================

:func:`double_backward.check` tells whether a custom Function supports double backward, and
when it does not, why. This page runs it on Functions like the ones real projects write: a
ReLU, a bilinear matmul, a loss with an integer target and a view. Each report opens with its
verdict in one line, then one line per check.

A problem is reported only when a check was seen to fail. What a failing report says is on
:doc:`/auto_examples/when_it_breaks/plot_16b_reading_a_failure`; how sure a passing one is, on
:doc:`/auto_examples/when_it_breaks/plot_16c_how_sure_is_a_pass`.
"""

# %%
# A ReLU: a zero second derivative is an answer
# ---------------------------------------------
# A ReLU whose backward multiplies by the mask ``x > 0`` is among the first custom Functions
# people write. Its gradient has no graph back to ``x``: that is right, since the second
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
# What the checks are
# -------------------
# While the Jacobians are small, :func:`~torch.autograd.gradcheck` and
# :func:`~torch.autograd.gradgradcheck` run. At every size the checker also tries random
# *signed* directions: the vector-Jacobian product and the Hessian-vector product are compared
# with central differences along each. Each direction costs a few calls of your Function, so
# the cost grows linearly with the inputs.
# The mixed term (the derivative in the incoming gradient, what a gradient penalty
# differentiates) is projected on a random signed vector and compared with backward's own
# product with it.

# %%
# At the kink: "could not decide"
# -------------------------------
# At inputs exactly on its kink (half of them 0, as after another ReLU), a ReLU has no
# derivative along any direction that moves them. Above gradcheck's size the central
# differences are all the evidence, and none can decide: the verdict says so, with why and
# what to try. It is never a pass.
print(check(MyReLU.apply, torch.randn(2000).clamp(min=0)))

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
# The gradient of ``a`` is a graph of torch ops on the saved ``b``, which is why a second
# backward can run through it. (Colours: :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.)
from double_backward.graph import autograd_graph

# sphinx_gallery_thumbnail_number = 1
a = torch.randn(4, 3, requires_grad=True)
b = torch.randn(3, 2, requires_grad=True)
(grad_a,) = torch.autograd.grad(MatMul.apply(a, b), a, torch.randn(4, 2), create_graph=True)
autograd_graph({"grad_a": grad_a}, {"a": a, "b": b},
               title="grad_a of MatMul: a matrix product with the saved b")

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
# Your Function's keywords
# ------------------------
# The Function's own keyword arguments go in ``kwargs={...}``, so none can collide with an
# option of the checker: a dropout taking ``seed=`` gets its seed, while the checker's
# ``seed=`` seeds its own directions.


class Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, seed):
        generator = torch.Generator().manual_seed(seed)
        mask = (torch.rand(x.shape, generator=generator) > p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad_out):
        (mask,) = ctx.saved_tensors
        return grad_out * mask, None, None


def dropout(x, *, p=0.5, seed):
    return Dropout.apply(x, p, seed)


print(check(dropout, torch.randn(4, 3), kwargs={"seed": 3, "p": 0.25}, seed=0).verdict)

# %%
# In your test suite
# ------------------
# :func:`double_backward.testing.assert_supports_double_backward` raises ``AssertionError``
# carrying the report, so a pytest test is one line. Here the tutorial's broken ``SinhBad``
# fails it:
from double_backward import SinhBad
from double_backward.testing import assert_supports_double_backward


def test_sinh_supports_double_backward():
    assert_supports_double_backward(SinhBad.apply, torch.rand(4, 3) + 0.5)


try:
    test_sinh_supports_double_backward()
except AssertionError as error:
    print(f"AssertionError: {error}")

# %%
# The incoming gradients a model feeds
# -------------------------------------
# The checks above feed backward contiguous incoming gradients, one at a time. A model feeds
# others: a transpose downstream hands backward a transposed one, a sum over a dimension an
# expanded one (stride 0), a loss that uses one output of several none for the others, and
# ``torch.autograd.grad(..., is_grads_batched=True)`` a batch. So check feeds those too, to
# backward and to the backward of backward. A backward that flattens its incoming gradient
# with ``.view(-1)`` computes the right values and raises in the first model that transposes
# its output; ``.reshape(-1)`` is its fix:


class SquareFlatView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.view(-1) * 2 * x.view(-1)).view(x.shape)


class SquareFlatReshape(SquareFlatView):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.reshape(-1) * 2 * x.reshape(-1)).reshape(x.shape)


x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
weight = torch.randn(3, 4, dtype=torch.float64)
try:  # plain torch, as a model calls it: a transpose, then a weight
    torch.autograd.grad((SquareFlatView.apply(x).t() * weight).sum(), x)
except RuntimeError as error:
    print(f"RuntimeError: {str(error)[:60]}...")
print(check(SquareFlatView.apply, torch.randn(4, 3)).verdict)
print(check(SquareFlatReshape.apply, torch.randn(4, 3)).results["incoming grads"])

# %%
# From the command line
# ---------------------
# ``python -m double_backward.checker module:Function`` checks a Function on random inputs.
# ``--shape`` gives each input's shape, and ``--domain positive|complex|...`` or ``--range
# low,high`` where they lie; ``--json`` prints the report for CI. It exits 0 when no problem is
# found, 1 when one is, and 2 for a usage error. The same, run here on the tutorial's broken
# ``SinhBad``:
from double_backward.checker import main

# Also: --arg, --arg-int-tensor 0,2,1, --kwarg name=value, --setup module:function and
# --surrogate-gradient; python -m double_backward.checker --help lists them all.
status = main(["double_backward:SinhBad", "--shape", "2,3", "--domain", "positive"])
print(f"exit status: {status}")

# %%
# Next
# ----
# Trust a problem the checker reports: a check failed, and the diagnosis names the likely cause
# and the page that shows the fix. Broken Functions and their reports:
# :doc:`/auto_examples/when_it_breaks/plot_16b_reading_a_failure`. When the op that breaks is a
# built-in inside a model
# (attention, ``cdist``), :func:`double_backward.check_model` finds it:
# :doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward`.
