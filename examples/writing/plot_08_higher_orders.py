r"""
Third order and beyond, and where to stop
=========================================

Double backward is second order, but nothing stops at two: a derivative of any order exists
exactly when every backward on the way is recorded by autograd, and is right when every op on
the way has a right formula at that order. This page measures how far each of the tutorial's
Functions goes, builds a pair of Functions differentiable to any order, shows
``once_differentiable``, the way to say "first order only", and when it stays silent, and where
native ops stop: a fused kernel at third order, and forward mode.
"""

# %%
# How far do the tutorial's Functions go?
# ---------------------------------------
# :func:`~double_backward.functions.higher_orders.derivatives` takes each derivative with
# ``create_graph=True`` from the previous one; each is compared with the same derivative of
# the native op at :math:`x = 0.7`. The table differentiates :math:`\sin f(x)`, not :math:`f`
# alone: :math:`x^2` has a third derivative of 0, and a backward that stopped working there
# would still "match" 0. Inside :math:`\sin`, every order of :math:`f`'s backward is used.
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
    pairs = list(
        zip(
            derivatives(lambda t, f=ours: torch.sin(f(t)), x, 4),
            derivatives(lambda t, f=native: torch.sin(f(t)), x, 4),
            strict=True,
        )
    )[1:]
    row = "".join(
        f"{'matches' if torch.allclose(a, b) else 'DIFFERS':>12}" for a, b in pairs
    )
    print(f"{name:8}{row}")

# %%
# The graph of ``Cube``'s first derivative, which each higher order differentiates again.
from double_backward.graph import autograd_graph

x_leaf = x.clone().requires_grad_()
(grad_x,) = torch.autograd.grad(Cube.apply(x_leaf), x_leaf, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x_leaf},
    title="Graph of Cube's first derivative, differentiated again for each higher order",
)

# %%
# All four reach the fourth order, for the same reason the second worked: ``Square``, ``Exp``
# and ``Sinh`` build backward from differentiable torch operations on tracked tensors, and
# ``Cube``'s backward is a Function (``CubeBackward``) whose own backward is again torch
# operations. Each backward is recorded, so the backward of the backward is too.
#
# A pair differentiable to any order
# ----------------------------------
# A backward may call other custom Functions.
# :class:`~double_backward.functions.higher_orders.Sin` uses
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
# :func:`torch.autograd.function.once_differentiable` runs it in no-grad mode, and when an
# incoming gradient requires grad it attaches the result to a node that raises. That error is
# not guaranteed: it depends on how the second derivative is asked for.
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: SquareOnceDifferentiable
from double_backward.functions.failures import SquareOnceDifferentiable

x = torch.tensor([0.5, 1.5], dtype=torch.float64, requires_grad=True)


def second_derivative(loss, by_backward):
    (grad_x,) = torch.autograd.grad(loss(x), x, create_graph=True)
    try:
        if by_backward:
            x.grad = None
            grad_x.sum().backward()
            return x.grad.tolist()
        return torch.autograd.grad(grad_x.sum(), x)[0].tolist()
    except RuntimeError as error:
        return f"RuntimeError: {error}"


# %%
# Loud: a second ``.backward()``, incoming gradient depending on ``x``
# --------------------------------------------------------------------
# For :math:`L = \tfrac12 \sum (x^2)^2` the incoming gradient is :math:`x^2`, which requires
# grad; ``.backward()`` runs every node of the graph, the decorator's included:
def squared(t):
    return (SquareOnceDifferentiable.apply(t) ** 2).sum() / 2


print(f".backward(): {second_derivative(squared, by_backward=True)}")


# %%
# Silent: another term of the loss reaches ``x``
# ----------------------------------------------
# The decorator's node hangs off a detached copy of the result, not off ``x``, and with a
# plain incoming gradient there is no node at all. So when another term of the loss depends on
# ``x``, here :math:`x^3`, the Function's own term is simply missing, by either call:
# :math:`6x` instead of :math:`2 + 6x`.
def plus_cube(t):
    return SquareOnceDifferentiable.apply(t).sum() + (t**3).sum()


print(f"grad():      {second_derivative(plus_cube, by_backward=False)}")
print(f".backward(): {second_derivative(plus_cube, by_backward=True)}")
print(f"right:       {(2 + 6 * x.detach()).tolist()}  (2 + 6x)")

# %%
# With :func:`torch.autograd.grad` alone, the error is not the decorator's but autograd's:
# the gradient does not require grad, or the decorator's node does not lead to ``x``.
print(
    f"grad(), alone:                  "
    f"{second_derivative(lambda t: SquareOnceDifferentiable.apply(t).sum(), False)}"
)
print(
    f"grad(), grad_out depends on x:  {second_derivative(squared, by_backward=False)}"
)

# %%
# Where inheritance stops: native kernels
# ---------------------------------------
# A backward made of native ops inherits their derivatives, and those are only as good as
# each op's own formulas. A fused native kernel saves statistics from its forward, as the
# trap of :doc:`/auto_examples/writing/plot_07c_layer_norm_trap` does, and its double
# backward formula
# accounts for them by hand; the formula one order up may not. ``F.batch_norm`` in training
# mode, each order of :math:`\sum_i c_i \cdot` (the previous derivative) against the same
# batch norm composed of ``mean``, ``var`` and elementwise ops (`pytorch/pytorch#186256
# <https://github.com/pytorch/pytorch/issues/186256>`_):
import torch.nn.functional as F

torch.manual_seed(0)
batch = torch.randn(6, 3, dtype=torch.float64)
weights = torch.linspace(0.5, 1.5, batch.numel(), dtype=torch.float64).view_as(batch)


def composed_batch_norm(t):
    return (t - t.mean(0)) / torch.sqrt(t.var(0, unbiased=False) + 1e-5)


def fused_batch_norm(t):
    return F.batch_norm(t, None, None, training=True)


def batch_norm_orders(norm, orders=3):
    t = batch.clone().requires_grad_()
    value, found = (norm(t) ** 3).sum(), []
    for _ in range(orders):
        (value,) = torch.autograd.grad(value, t, create_graph=True)
        found.append(value)
        value = (value * weights).sum()
    return found


def difference(a, b):
    """The largest difference; rounding-level ones (which vary by machine) as a bound."""
    largest = (a - b).abs().max().item()
    return f"{largest:.1e}" if largest > 1e-10 else "below 1e-10"


print(f"torch {torch.__version__}, F.batch_norm (training) against the composed version:")
for order, (fused, composed) in enumerate(
    zip(batch_norm_orders(fused_batch_norm), batch_norm_orders(composed_batch_norm),
        strict=True),
    start=1,
):
    print(f"order {order}: largest difference {difference(fused, composed)}")

# %%
# Forward mode is the other limit: a Function's ``jvp`` staticmethod, or a native op's
# forward-mode formula, is a derivative of its own, inherited by nothing. ``F.layer_norm``'s
# second derivative is right by ``jacrev`` over ``jacrev``, and wrong wherever forward mode
# comes first (`pytorch/pytorch#196700 <https://github.com/pytorch/pytorch/issues/196700>`_):
from torch.func import jacfwd, jacrev

rows = torch.randn(2, 5, dtype=torch.float64)
gain, shift = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)


def layer_norm_loss(norm):
    return lambda t: (norm(t) ** 3).sum()


def fused_layer_norm(t):
    return F.layer_norm(t, (5,), gain, shift)


def composed_layer_norm(t):
    centred = t - t.mean(-1, keepdim=True)
    return centred / torch.sqrt((centred**2).mean(-1, keepdim=True) + 1e-5) * gain + shift


for name, outer, inner in (("jacrev(jacrev)", jacrev, jacrev), ("jacfwd(jacrev)", jacfwd, jacrev),
                           ("jacrev(jacfwd)", jacrev, jacfwd), ("jacfwd(jacfwd)", jacfwd, jacfwd)):
    fused, composed = (outer(inner(layer_norm_loss(norm)))(rows)
                       for norm in (fused_layer_norm, composed_layer_norm))
    print(f"F.layer_norm Hessian by {name}: largest difference {difference(fused, composed)}")

# %%
# Takeaway
# --------
# Differentiability is inherited, in reverse mode. A backward made of recorded operations, or
# of Functions with their own backward, can be differentiated again, to the order its native
# ops' own formulas are right (fused kernels such as batch norm's stop at the third). Forward
# mode inherits nothing from backward.
#
# When a backward cannot be differentiated, mark it ``@once_differentiable``, but do not count
# on an error: it is loud only for a second ``.backward()`` whose incoming gradient requires
# grad, and silent when other terms of the loss reach the input. Test the second derivative
# the way your code takes it, or run :func:`~torch.autograd.gradgradcheck`, which raises.
#
# Next, how long a graph lives when you differentiate it more than once:
# :doc:`/auto_examples/writing/plot_09_graph_lifetime`; more mistakes that are not
# loud: :doc:`/auto_examples/when_it_breaks/plot_13_failure_gallery`.
