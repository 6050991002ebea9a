r"""
Dtypes: complex inputs, float16 and bfloat16, autocast
======================================================

Every Function so far ran in float64. This page takes three other cases readers meet: complex
inputs, where PyTorch's convention puts a conjugate in every backward; float16 and bfloat16,
where double backward runs but :func:`~torch.autograd.gradcheck`, at its default settings,
cannot check it; and
:class:`torch.autocast`, where a custom backward has to be told which precision forward ran in.
"""

# %%
# Complex inputs: the conjugate in backward
# -----------------------------------------
# For a holomorphic :math:`f`, PyTorch's backward returns
# :math:`\bar{z} = \bar{y}\,\overline{f'(z)}`: the gradient of a real loss :math:`L` with
# respect to :math:`z` is :math:`\partial L/\partial \operatorname{Re} z + i\,\partial
# L/\partial \operatorname{Im} z`, twice the derivative with respect to the conjugate
# :math:`\bar{z}`, and gradient descent steps against it. For :math:`y = z^2` that is
# :math:`2\,\bar{y}\,\overline{z}`; for :math:`L = \sum |z|^2` it is :math:`2z` (printed
# below).
#
# .. literalinclude:: /../src/double_backward/functions/complex_square.py
#    :pyobject: ComplexSquare
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward.functions.complex_square import ComplexSquare

z = torch.tensor(
    [1 + 2j, -0.5 + 1j, 3 - 1j], dtype=torch.complex128, requires_grad=True
)
(grad_z,) = torch.autograd.grad((z.abs() ** 2).sum(), z)
print(f"gradient of sum |z|^2: {grad_z.numpy()}  (2z: {(2 * z).detach().numpy()})")
print(f"gradcheck(ComplexSquare)     passed: {gradcheck(ComplexSquare.apply, (z,))}")
print(
    f"gradgradcheck(ComplexSquare) passed: {gradgradcheck(ComplexSquare.apply, (z,))}"
)

# %%
# A Square without ``conj`` (broken on purpose)
# ---------------------------------------------
# The real-valued formula :math:`2\,\bar{y}\,z`, copied from :class:`~double_backward.Square`:
#
# .. literalinclude:: /../src/double_backward/functions/complex_square.py
#    :pyobject: ComplexSquareNoConj
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.complex_square import ComplexSquareNoConj

try:
    gradcheck(ComplexSquareNoConj.apply, (z,))
except GradcheckError as error:
    print(f"gradcheck: GradcheckError: {str(error).splitlines()[0]}")
no_conj_passes = gradgradcheck(ComplexSquareNoConj.apply, (z,))
print(f"gradgradcheck(ComplexSquareNoConj) passed: {no_conj_passes}")


# %%
# Only ``gradcheck`` catches it
# -----------------------------
# :func:`~torch.autograd.gradgradcheck` compares the derivative of backward with backward
# itself; a backward that is wrong but made of recorded operations is consistent with itself.
# So run both checks. The gradient of a real loss, :math:`\sum |z^2 - 1|^2`, against native
# ``z * z``:
def grad_of_loss(square):
    return torch.autograd.grad((square(z) - 1).abs().pow(2).sum(), z)[0]


print(f"ComplexSquare      : {grad_of_loss(ComplexSquare.apply).numpy()}")
print(f"ComplexSquareNoConj: {grad_of_loss(ComplexSquareNoConj.apply).numpy()}")
print(f"native z * z       : {grad_of_loss(lambda t: t * t).numpy()}")

# %%
# Double backward, complex
# ------------------------
# ``conj`` is a recorded operation, so the gradient has a graph back to :math:`z`. A second
# vector-Jacobian product, against native ``z * z``:
v = torch.tensor([1 - 1j, 2 + 0j, 0.5j], dtype=torch.complex128)
for label, square in [
    ("ComplexSquare", ComplexSquare.apply),
    ("native z * z", lambda t: t * t),
]:
    (grad_z,) = torch.autograd.grad(square(z), z, v, create_graph=True)
    (grad2_z,) = torch.autograd.grad(grad_z, z, v)
    # (+ 0 turns a conjugated -0j into 0j for printing.)
    print(f"{label:13}: second order {(grad2_z.resolve_conj() + 0).numpy()}")

# %%
# The graph of the last ``grad_z`` (native ``z * z``): the ``conj`` is a node of its own.
from double_backward.graph import autograd_graph

(grad_z,) = torch.autograd.grad(z * z, z, v, create_graph=True)
autograd_graph(
    {"grad_z": grad_z},
    {"z": z},
    title="Graph of grad_z for native z * z on complex input",
)

# %%
# The real-valued Functions refuse complex input
# ----------------------------------------------
# The package's other Functions implement real derivatives only, so they say so rather than
# return a gradient without its conjugate:
from double_backward import Square

try:
    Square.apply(z)
except TypeError as error:
    print(f"TypeError: {error}")

# %%
# float16 and bfloat16: double backward runs
# ------------------------------------------
# :func:`double_backward.sinh` in half precision: both derivatives come out, in the input's
# dtype.
from double_backward import sinh
from double_backward.functions.higher_orders import derivatives

points = torch.tensor([0.01, 0.1, 1.0, 3.0], dtype=torch.float64)
for dtype in (torch.float16, torch.bfloat16):
    _, first, second = derivatives(sinh, points.to(dtype), 2)
    print(
        f"{str(dtype):14} d/dx: {first.tolist()}  d2/dx2: {second.tolist()}  ({second.dtype})"
    )

# %%
# ... but ``gradcheck`` cannot check it
# -------------------------------------
# :func:`~torch.autograd.gradcheck` warns that its input is "not a double precision floating
# point", then fails: its default finite-difference step (``eps=1e-6``) is below float16's
# spacing at these points, so the numerical Jacobian is all zeros. A failure here says nothing
# about the Function: check it in float64.
import warnings

half = points.to(torch.float16).requires_grad_()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        gradcheck(sinh, (half,))
    except GradcheckError as error:
        message = str(error).splitlines()
        print(f"GradcheckError: {message[0]}")
        print(f"  {message[1]} ...")
for warning in caught:
    print(f"{warning.category.__name__}: {str(warning.message).strip()}")

# %%
# Check in float64
# ----------------
# Write the Function without a fixed dtype, and check the same code in float64: a wrong formula
# is wrong in every dtype. What float64 cannot show is the rounding of the low-precision run.
points_64 = points.clone().requires_grad_()
print(f"gradcheck(sinh, float64)     passed: {gradcheck(sinh, (points_64,))}")
print(f"gradgradcheck(sinh, float64) passed: {gradgradcheck(sinh, (points_64,))}")

# %%
# What to watch at low precision: cancellation
# --------------------------------------------
# So compare the low-precision run with the *native op in the same dtype*, both against float64.
# :class:`~double_backward.Sinh`'s second derivative is :math:`e^x/2 - e^{-x}/2`, two numbers
# near :math:`\tfrac12` when :math:`x` is small; bfloat16 keeps 8 significant bits, so their
# difference loses most of them. ``torch.sinh``'s own derivative computes :math:`\sinh x`
# directly.
exact = derivatives(torch.sinh, points, 2)[2].detach()
ours = derivatives(sinh, points.to(torch.bfloat16), 2)[2].detach().double()
native = derivatives(torch.sinh, points.to(torch.bfloat16), 2)[2].detach().double()
print(f"float64           : {exact.numpy().round(5)}")
print(f"sinh, bfloat16    : {ours.numpy().round(5)}")
print(f"torch.sinh, bf16  : {native.numpy().round(5)}")
print(f"relative error, sinh      : {((ours - exact).abs() / exact).numpy().round(3)}")
print(
    f"relative error, torch.sinh: {((native - exact).abs() / exact).numpy().round(3)}"
)
print(f"bfloat16 eps: {torch.finfo(torch.bfloat16).eps}")

# %%
# What to watch at low precision: overflow in a derivative
# --------------------------------------------------------
# float16 stops at 65 504. :class:`~double_backward.Exp` at :math:`x = 10` gives 22 032, which
# fits; its gradient multiplies by ``grad_out``, and a loss scaled by 4 already overflows.
# Mixed-precision training scales the loss by far more: :class:`~torch.amp.GradScaler` starts
# at the scale printed below. A gradient penalty differentiates such a gradient once more.
from double_backward import Exp

x16 = torch.tensor([10.0], dtype=torch.float16, requires_grad=True)
out = Exp.apply(x16)
(grad_x,) = torch.autograd.grad(out, x16, torch.tensor([4.0], dtype=torch.float16))
print(f"y = e^10 in float16: {out.item()}   4 * dy/dx: {grad_x.item()}")
print(f"largest float16: {torch.finfo(torch.float16).max}")
print(f"GradScaler's initial loss scale: {torch.amp.GradScaler('cpu').get_scale()}")

# %%
# Autocast: backward runs outside the region
# ------------------------------------------
# Under :class:`torch.autocast`, ``a @ b`` runs in bfloat16 (on the CPU). A custom Function's
# forward runs inside the region, but its backward runs when the gradient is asked for, usually
# after the ``with`` block. A matmul Function without decorators:
#
# .. literalinclude:: /../src/double_backward/functions/autocast.py
#    :pyobject: MatmulNoCustomBwd
from double_backward.functions.autocast import MatmulAutocast, MatmulNoCustomBwd

generator = torch.Generator().manual_seed(0)
a = torch.randn(3, 4, generator=generator).requires_grad_()
b = torch.randn(4, 2, generator=generator).requires_grad_()


def penalty_gradient(matmul):
    """A gradient penalty through matmul(a, b) under autocast: a double backward."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = matmul(a, b).float().pow(2).sum()
    grads = torch.autograd.grad(loss, (a, b), create_graph=True)
    return torch.autograd.grad(sum(grad.pow(2).sum() for grad in grads), (a, b))


try:
    penalty_gradient(MatmulNoCustomBwd.apply)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# Why it fails
# ------------
# Forward returned a bfloat16 product, so ``grad_out`` arrives in bfloat16; backward runs with
# autocast off, and ``grad_out @ b.mT`` meets a float32 ``b``.
#
# ``custom_fwd`` and ``custom_bwd``
# ---------------------------------
# :func:`torch.amp.custom_fwd` records the autocast state forward runs in;
# :func:`torch.amp.custom_bwd` runs backward, and so the ops double backward will differentiate,
# in that same state.
#
# .. literalinclude:: /../src/double_backward/functions/autocast.py
#    :pyobject: MatmulAutocast
ours = penalty_gradient(MatmulAutocast.apply)
native = penalty_gradient(torch.matmul)
a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
grads_64 = torch.autograd.grad((a64 @ b64).pow(2).sum(), (a64, b64), create_graph=True)
exact = torch.autograd.grad(sum(grad.pow(2).sum() for grad in grads_64), (a64, b64))
for label, result in [("MatmulAutocast", ours), ("torch.matmul  ", native)]:
    errors = [
        ((g.double() - e).norm() / e.norm()).item()
        for g, e in zip(result, exact, strict=True)
    ]
    print(
        f"{label}: penalty gradient relative error vs float64: {errors[0]:.1e}, {errors[1]:.1e}"
    )
print(f"bfloat16 eps: {torch.finfo(torch.bfloat16).eps:.1e}")

# %%
# Reading the result
# ------------------
# With the decorators, the double backward runs, and both it and native ``torch.matmul`` are
# within a bfloat16 rounding of the float64 answer (errors below bfloat16's eps). Check the
# Function itself in float64, with autocast off: the tests run ``gradgradcheck`` on it.
#
# Conclusion
# ----------
# For complex inputs, conjugate :math:`f'(z)` in backward and run ``gradcheck``: gradgradcheck
# alone passes a missing conjugate. In float16 and bfloat16, double backward runs, but check the
# code in float64 and compare the low-precision run with the native op in the same dtype:
# cancellation and overflow are where they differ. Under autocast, decorate forward and backward
# with ``custom_fwd`` and ``custom_bwd``.
#
# Next: backwards that are deliberately *not* the derivative, in
# :doc:`/auto_examples/writing/plot_12_surrogate_gradients`.
