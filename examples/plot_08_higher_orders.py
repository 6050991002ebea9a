r"""
Third order and beyond, and where to stop
=========================================

Double backward is second order, but nothing stops at two: a derivative of any order exists
exactly when every backward on the way is recorded by autograd. This page measures how far
each of the tutorial's Functions goes, builds a pair of Functions differentiable to any order,
and shows ``once_differentiable``, the honest way to say "first order only".
"""

# %%
# How far do the tutorial's Functions go?
# ---------------------------------------
# :func:`~double_backward.functions.higher_orders.derivatives` takes each derivative with
# ``create_graph=True`` from the previous one; each is compared with the same derivative of
# the native op at :math:`x = 0.7`.
import torch

from double_backward import Cube, Exp, Square, sinh
from double_backward.functions.higher_orders import derivatives

x = torch.tensor(0.7, dtype=torch.float64)
PAIRS = {
    "Square": (Square.apply, lambda t: t**2),
    "Exp": (Exp.apply, torch.exp),
    "Sinh": (sinh, torch.sinh),
    "Cube": (Cube.apply, lambda t: t**3),
}
print(f"{'':8}" + "".join(f"{'order ' + str(n):>12}" for n in range(1, 5)))
for name, (ours, native) in PAIRS.items():
    pairs = list(zip(derivatives(ours, x, 4), derivatives(native, x, 4), strict=True))[
        1:
    ]
    row = "".join(
        f"{'matches' if torch.allclose(a, b) else 'DIFFERS':>12}" for a, b in pairs
    )
    print(f"{name:8}{row}")

# %%
# All four reach the fourth order, for the same reason the second worked: ``Square``, ``Exp``
# and ``Sinh`` build backward from differentiable torch operations on tracked tensors, and
# ``Cube``'s backward is a Function (``CubeBackward``) whose own backward is again torch
# operations. Each backward is recorded, so the backward of the backward is too.
#
# A pair differentiable to any order
# ----------------------------------
# A backward may call other custom Functions. :class:`~double_backward.functions.higher_orders.Sin` uses
# :class:`~double_backward.functions.higher_orders.Cos` in its backward, and ``Cos`` uses ``Sin``:
#
# .. literalinclude:: /../src/double_backward/functions/higher_orders.py
#    :pyobject: Sin
#
# .. literalinclude:: /../src/double_backward/functions/higher_orders.py
#    :pyobject: Cos
from double_backward.functions.higher_orders import Sin

for order, (ours, native) in enumerate(
    zip(derivatives(Sin.apply, x, 8), derivatives(torch.sin, x, 8), strict=True)
):
    print(
        f"d^{order} sin / dx^{order} at 0.7: {ours.item():+.6f}  (native {native.item():+.6f})"
    )

# %%
# Where to stop: ``once_differentiable``
# --------------------------------------
# A backward that cannot be made differentiable (it calls code autograd cannot see and you do
# not want to write its derivative) should say so. Decorating backward with
# :func:`torch.autograd.function.once_differentiable` runs it in no-grad mode and makes any
# attempt to differentiate its result fail loudly instead of returning a wrong number.
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SquareOnceDifferentiable
from double_backward.functions.failures import SquareOnceDifferentiable

x = torch.tensor([0.5, 1.5], dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(
    SquareOnceDifferentiable.apply(x).sum(), x, create_graph=True
)
print(f"first derivative: {grad_x.tolist()}  (analytic 2x = {(2 * x).tolist()})")

# %%
# When the incoming gradient requires grad (as in a gradient penalty, or
# :func:`~torch.autograd.gradgradcheck`), the second backward reaches the decorator's guard and
# gets its error message:
grad_out = torch.ones_like(x, requires_grad=True)
(grad_x,) = torch.autograd.grad(
    SquareOnceDifferentiable.apply(x), x, grad_out, create_graph=True
)
try:
    grad_x.sum().backward()
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# With a plain incoming gradient there is no graph at all, and autograd says so:
(grad_x,) = torch.autograd.grad(
    SquareOnceDifferentiable.apply(x).sum(), x, create_graph=True
)
try:
    torch.autograd.grad(grad_x.sum(), x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# Takeaway
# --------
# Differentiability is inherited: a backward made of recorded operations or of Functions with
# their own backward can be differentiated again, to any order. When it cannot, mark it
# ``@once_differentiable`` so the failure is loud. Next, the mistakes that are not loud:
# :doc:`plot_13_failure_gallery`.
