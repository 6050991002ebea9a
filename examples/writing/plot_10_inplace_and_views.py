r"""
In-place edits, returned inputs and ``grad_out``
================================================

A Function that overwrites a tensor saves memory, and autograd has a method for it:
:meth:`~torch.autograd.function.FunctionCtx.mark_dirty`. Whether double backward stays right
depends on what backward reads afterwards. This page runs a correct in-place ``exp_``, then three
ways to get it wrong (one of them a silently wrong *first* derivative, with no error), a Function
that returns its input as-is, and a backward that edits ``grad_out``.
"""

# %%
# An in-place exponential, marked dirty
# -------------------------------------
# :class:`~double_backward.functions.inplace.ExpInplace` overwrites ``x`` with :math:`e^x` and
# calls ``ctx.mark_dirty(x)``: the edited tensor becomes its output. Backward needs
# :math:`e^x`, which *is* the output, so it saves the output, as :class:`~double_backward.Exp`
# does.
#
# .. literalinclude:: /../src/double_backward/functions/inplace.py
#    :pyobject: ExpInplace
#
# Autograd refuses to edit a leaf that requires grad, but only once forward has returned: the
# leaf is overwritten by then. So ``ExpInplace`` checks first and says what to pass instead:
import torch

from double_backward.functions.inplace import ExpInplace

x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
try:
    ExpInplace.apply(x)
except ValueError as error:
    print(f"on the leaf itself: ValueError: {error}")
print(f"x afterwards: {x.detach().numpy()}  (untouched)")

# %%
# Without that check
# ------------------
# :class:`~double_backward.functions.inplace.SquareInplaceSavesInput`, shown in full below, has
# no such check. Torch's own error comes after its forward squared the leaf:
from double_backward.functions.inplace import SquareInplaceSavesInput

leaf = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
try:
    SquareInplaceSavesInput.apply(leaf)
except RuntimeError as error:
    print(f"RuntimeError: {error}")
print(f"leaf afterwards: {leaf.detach().numpy()}  (squared anyway)")

# %%
# Its first and second derivatives
# --------------------------------
# On ``x.clone()``, a tensor with history, both derivatives are :math:`e^x`, and both checks pass.
from torch.autograd import gradcheck, gradgradcheck


def exp_inplace(inputs):
    return ExpInplace.apply(inputs.clone())


(grad_x,) = torch.autograd.grad(exp_inplace(x).sum(), x, create_graph=True)
(grad2_x,) = torch.autograd.grad(grad_x.sum(), x)
print(f"dy/dx    : {grad_x.detach().numpy().round(4)}")
print(f"d2y/dx2  : {grad2_x.numpy().round(4)}")
print(f"e^x      : {torch.exp(x).detach().numpy().round(4)}")
print(f"gradcheck passed: {gradcheck(exp_inplace, (x,))}")
print(f"gradgradcheck passed: {gradgradcheck(exp_inplace, (x,))}")

# %%
# The graph of ``grad_x`` through the in-place Function, back to ``x`` through the clone.
from double_backward.graph import autograd_graph

(grad_x,) = torch.autograd.grad(exp_inplace(x).sum(), x, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x through ExpInplace on a clone of x",
)

# %%
# Saving a copy of the input from before the edit (broken on purpose)
# -------------------------------------------------------------------
# Another way to keep what backward needs: copy ``x`` before overwriting it.
#
# .. literalinclude:: /../src/double_backward/functions/inplace.py
#    :pyobject: ExpInplaceSavesInputCopy
#
# The copy is made inside forward, where nothing is recorded: it is an intermediate with no
# history, the trap of :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`. The first
# derivative is right;
# the second misses the term through ``x``.
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.inplace import ExpInplaceSavesInputCopy


def exp_inplace_saves_copy(inputs):
    return ExpInplaceSavesInputCopy.apply(inputs.clone())


print(f"gradcheck passed: {gradcheck(exp_inplace_saves_copy, (x,))}")
try:
    gradgradcheck(exp_inplace_saves_copy, (x,))
except GradcheckError as error:
    print(f"gradgradcheck: GradcheckError: {str(error).splitlines()[0]}")

# %%
# Saving the input, then editing it (broken on purpose)
# -----------------------------------------------------
# :class:`~double_backward.functions.inplace.SquareInplaceSavesInput` saves ``x``, then squares
# it in place. ``save_for_backward`` keeps the tensor, not its values.
#
# .. literalinclude:: /../src/double_backward/functions/inplace.py
#    :pyobject: SquareInplaceSavesInput
#
# The first derivative should be :math:`2x`:
out = SquareInplaceSavesInput.apply(x.clone())
(grad_x,) = torch.autograd.grad(out.sum(), x)
for label, got, expected in [
    ("y     ", out.detach(), (x**2).detach()),
    ("dy/dx ", grad_x, (2 * x).detach()),
]:
    verdict = "right" if torch.allclose(got, expected) else "SILENTLY WRONG"
    print(f"{label}: {got.numpy()}  expected {expected.numpy()}: {verdict}")
print("no error was raised")

# %%
# Why no version error
# --------------------
# Autograd raises "modified by an inplace operation" when a saved tensor's version changed
# after forward returned: it records the version then, not at ``save_for_backward``. The edit
# here happens inside forward, before that, so nothing looks stale: backward reads :math:`x^2`
# where it expects :math:`x` and returns :math:`2x^2`. Only a numerical check sees it:
square_inplace = lambda inputs: SquareInplaceSavesInput.apply(inputs.clone())  # noqa: E731
print(f"gradcheck passed: {gradcheck(square_inplace, (x,), raise_exception=False)}")

# %%
# The rule, and the fix
# ---------------------
# Edit in place only when backward needs nothing but the *output*, as :math:`e^x` for ``exp_``.
# Square needs :math:`x`, and :math:`x^2` has lost its sign: use the out-of-place
# :class:`~double_backward.Square`. A saved copy of the input, as above, fixes the first
# derivative only.
#
# Returning an input as-is
# ------------------------
# Gradient-scaling, logging and marker Functions often return their input unchanged.
# :class:`~double_backward.functions.inplace.ReturnsInputAsIs` does, and passes the gradient
# through; double backward works, since ``grad_x = grad_out`` is differentiable.
#
# .. literalinclude:: /../src/double_backward/functions/inplace.py
#    :pyobject: ReturnsInputAsIs
from double_backward.functions.inplace import ReturnsInputAsIs

print(f"gradgradcheck passed: {gradgradcheck(ReturnsInputAsIs.apply, (x,))}")
hidden = x * 1.0
out = ReturnsInputAsIs.apply(hidden)
print(f"output is a view of the input: {out._base is hidden}")

# %%
# Editing it in place later
# -------------------------
# The output shares the input's memory, and autograd forbids editing either afterwards: its
# view-and-inplace handling would replace the Function's backward. An edit of the output fails
# at once; an edit of the input fails as soon as the output is used again (here ``out.sum()``,
# before any backward runs).
try:
    out.mul_(3)
except RuntimeError as error:
    print(f"editing the output: RuntimeError: {error}")

hidden = x * 1.0
out = ReturnsInputAsIs.apply(hidden)
hidden.mul_(3)
# Each step separately, so that the output says which one raises.
step = "out.sum()"
try:
    total = out.sum()
    step = "torch.autograd.grad"
    torch.autograd.grad(total, x)
except RuntimeError as error:
    print(
        f"editing the input, then {step}: RuntimeError: {str(error).split('.')[0]}."
    )

# %%
# The fix: return a copy, if the caller edits
# -------------------------------------------
# The error message's fix: ``return x.clone()`` in forward, at the price of one more tensor of
# memory, or have the caller clone before editing. With a copy, the edit is an ordinary
# recorded operation and the gradient includes it:
out = ReturnsInputAsIs.apply(x * 1.0).clone()
out.mul_(3)
(grad_x,) = torch.autograd.grad(out.sum(), x)
print(f"d(3y)/dx: {grad_x.numpy()}  (expected 3 everywhere)")

# %%
# A backward that edits ``grad_out`` (broken on purpose)
# ------------------------------------------------------
# :class:`~double_backward.functions.inplace.SquareEditsGradOut` multiplies ``grad_out`` in
# place to save one allocation.
#
# .. literalinclude:: /../src/double_backward/functions/inplace.py
#    :pyobject: SquareEditsGradOut
#
# ``grad_out`` belongs to the caller. For ``y.sum()`` it is a broadcast view of one number:
from double_backward.functions.inplace import SquareEditsGradOut

try:
    torch.autograd.grad(SquareEditsGradOut.apply(x).sum(), x)
except RuntimeError as error:
    print(f"y.sum(): RuntimeError: {error}")

# %%
# In a residual branch it is silently wrong
# -----------------------------------------
# In ``h + f(h)``, the backward of ``+`` hands *one* gradient tensor to both branches. ``f``'s
# backward overwrites it, and the other branch then reads the edited values. The first
# derivative of :math:`(h + h^2) \cdot w` is :math:`w (1 + 2x)`:
w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)


def residual_gradient(square):
    hidden = x * 1.0
    return torch.autograd.grad(((hidden + square(hidden)) * w).sum(), x)[0]


print(f"SquareEditsGradOut: {residual_gradient(SquareEditsGradOut.apply).numpy()}")
print(f"native x**2       : {residual_gradient(lambda h: h**2).numpy()}")
print(f"w (1 + 2x)        : {(w * (1 + 2 * x)).detach().numpy()}")

# %%
# ``gradgradcheck`` refuses it; a gradient penalty does not
# ---------------------------------------------------------
# In :func:`~torch.autograd.gradgradcheck`, ``grad_out`` requires grad and is a leaf, which
# autograd never lets you edit in place. ``gradcheck`` passes all along:
print(f"gradcheck passed: {gradcheck(SquareEditsGradOut.apply, (x,))}")
try:
    gradgradcheck(SquareEditsGradOut.apply, (x,))
except RuntimeError as error:
    print(f"gradgradcheck: RuntimeError: {error}")

# %%
# In a gradient penalty, ``grad_out`` comes from the layers above, recorded under
# ``create_graph=True``: it is not a leaf, and the edit is allowed. Nothing raises, and in the
# residual branch the penalty's gradient is as wrong as the first derivative it is built from.
# Here the weight ``w`` is trained, so the gradient reaching the branch requires grad:
w_trained = w.clone().requires_grad_()


def penalty_gradient(square):
    x_leaf = x.detach().requires_grad_()
    hidden = x_leaf * 1.0
    loss = ((hidden + square(hidden)) * w_trained).sum()
    (grad_x,) = torch.autograd.grad(loss, x_leaf, create_graph=True)
    return torch.autograd.grad((grad_x**2).sum(), x_leaf)[0]


print(f"SquareEditsGradOut: {penalty_gradient(SquareEditsGradOut.apply).numpy()}")
print(f"native x**2       : {penalty_gradient(lambda h: h**2).numpy()}")

# %%
# Conclusion
# ----------
# ``mark_dirty`` is safe for double backward when backward needs only the output: save the
# output. Saving the input and then editing it gives a wrong first derivative with no error;
# saving a copy gives a wrong second derivative. A Function may return its input as-is, but then
# nobody may edit either tensor in place. Never edit ``grad_out``: compute out of place.
# ``gradcheck`` and ``gradgradcheck`` in float64 catch each of these.
#
# Next: when the inputs are complex or in low precision, in
# :doc:`/auto_examples/writing/plot_11_dtypes`.
