r"""
Graph lifetime: backward twice, ``retain_graph``, checkpoints
=============================================================

A backward frees the tensors saved in every node it walks, unless told to keep them. With double
backward that rule bites in places a first-order user never meets: a second Hessian-vector
product on the same gradient, a first-order gradient taken after the second backward,
``backward(create_graph=True)``, and activation checkpointing. This page runs each, shows the real
message, says what ``retain_graph=True`` does, and counts the bytes each choice keeps alive.
"""

# %%
# One Hessian-vector product
# --------------------------
# :class:`double_backward.Exp` saves its output. ``grad_x`` is taken with ``create_graph=True``,
# then differentiated once along ``v``: :math:`H v = e^x \odot v`.
import torch

from double_backward import Exp

x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
v = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
loss = Exp.apply(x).sum()
(grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
(hvp,) = torch.autograd.grad(grad_x, x, v)
print(f"H v          : {hvp.numpy().round(4)}")
print(f"e^x * v      : {(torch.exp(x) * v).detach().numpy().round(4)}")

# %%
# The graph every product on this page runs through, ``grad_x``'s, drawn from a fresh
# ``grad_x``: the product above freed the first one's saved tensors.
from double_backward.graph import autograd_graph

(fresh_grad_x,) = torch.autograd.grad(Exp.apply(x).sum(), x, create_graph=True)
autograd_graph(
    {"grad_x": fresh_grad_x},
    {"x": x},
    title="Graph of grad_x for Exp, which every Hessian-vector product here differentiates",
)

# %%
# A second product on the same gradient
# -------------------------------------
# A Newton or conjugate-gradient solver asks for many products from one ``grad_x``. The second
# one fails: the first product's backward freed the tensors saved in the graph of ``grad_x``.
w = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
try:
    torch.autograd.grad(grad_x, x, w)
except RuntimeError as error:
    print(f"second product: RuntimeError: {error}")

# %%
# What ``retain_graph=True`` means
# --------------------------------
# Every backward frees the saved tensors of the nodes it runs through, unless it is passed
# ``retain_graph=True``. ``create_graph=True`` implies it (the graph it builds refers to them),
# which is why the first ``grad`` above left the forward's graph usable. So: pass
# ``retain_graph=True`` to every product but the last. That is what the pages that take several
# derivatives from one graph do.
loss = Exp.apply(x).sum()
(grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
products = [
    torch.autograd.grad(grad_x, x, direction, retain_graph=keep)[0]
    for direction, keep in [(v, True), (w, False)]
]
print(f"H v: {products[0].numpy().round(4)}   H w: {products[1].numpy().round(4)}")
torch.testing.assert_close(products[1], torch.exp(x.detach()) * w)

# %%
# The original loss, after the second backward
# --------------------------------------------
# The graph of ``grad_x`` reaches ``x`` through the saved output, whose ``grad_fn`` is ``Exp``'s
# own backward node: the graph of the *loss*. So the second backward frees the loss's graph too,
# and a first-order gradient of the loss taken afterwards fails with the same message.


def grad_of_loss_after_second_backward(loss_of, retain_graph=False):
    loss = loss_of(x)
    (grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
    torch.autograd.grad(grad_x, x, v, retain_graph=retain_graph)  # the second backward
    try:
        return torch.autograd.grad(loss, x)[0].numpy().round(4)
    except RuntimeError as error:
        return f"RuntimeError: {str(error)[:58]}..."


freed = grad_of_loss_after_second_backward(lambda t: Exp.apply(t).sum())
print(f"Exp, grad of the loss after:    {freed}")

# %%
# Whether it fails depends on what backward saved, and on the loss
# ----------------------------------------------------------------
# :class:`double_backward.Square` saves its *input*. With the plain loss ``Square(x).sum()``,
# :math:`\bar{y}` is a constant and ``grad_x``, :math:`2x\,\bar{y}`, has a graph of its own
# that does not run through ``Square``'s node, so the loss's graph survives. In a composed loss
# :math:`\bar{y}` depends on the output (for :math:`\sin y` it is :math:`\cos y`), so
# ``grad_x`` reaches ``x`` through ``Square``'s node too, and the loss's graph is freed as for
# ``Exp``. Take first-order gradients before the second backward, or pass
# ``retain_graph=True`` to it, and it works in every case.
from double_backward import Square

square = grad_of_loss_after_second_backward(lambda t: Square.apply(t).sum())
print(f"Square, grad of the loss after: {square}  (2x = {2 * x.detach().numpy()})")
composed = grad_of_loss_after_second_backward(lambda t: torch.sin(Square.apply(t)).sum())
print(f"sin(Square), grad of the loss after: {composed}")
kept = grad_of_loss_after_second_backward(lambda t: Exp.apply(t).sum(), retain_graph=True)
print(f"Exp, with retain_graph=True:    {kept}  (e^x)")

# %%
# What each choice keeps alive
# ----------------------------
# :func:`~double_backward.costs.held_memory` counts the bytes a step leaves allocated, from the
# allocations ``torch.profiler`` records: bytes, not times, so the numbers below are the same on
# every build. The step is ``Exp(sinh(x))`` on 100 000 float64 values (one tensor: 800 000
# bytes), then a backward; the loss and gradient the step returns are subtracted, so what is left
# is what the graph holds. :func:`~double_backward.sinh` saves two tensors and ``Exp`` one.
from functools import partial

from double_backward import sinh
from double_backward.costs import held_memory

big_x = torch.linspace(-2, 2, 100_000, dtype=torch.float64, requires_grad=True)
one_tensor = big_x.nbytes


def forward_then_backward(**options):
    loss = Exp.apply(sinh(big_x)).sum()
    return loss, torch.autograd.grad(loss, big_x, **options)[0]


for label, options in [
    ("grad(loss, x)", {}),
    ("grad(loss, x, retain_graph=True)", {"retain_graph": True}),
    ("grad(loss, x, create_graph=True)", {"create_graph": True}),
]:
    (loss, grad), held = held_memory(partial(forward_then_backward, **options))
    graph_bytes = held - loss.nbytes - grad.nbytes
    tensors, rest = divmod(graph_bytes, one_tensor)
    print(
        f"{label:33} graph holds {graph_bytes:>9,} bytes = {tensors} x-sized tensors + {rest} bytes"
    )

# %%
# Reading the numbers
# -------------------
# A plain backward frees the forward's three saved tensors. ``retain_graph=True`` keeps them until
# you drop the loss. ``create_graph=True`` keeps them *and* what its own backward saved for the
# second backward (here two more tensors of the input's size, and a scalar). Hold a ``grad_x``
# made with ``create_graph=True`` only as long as you need it.
#
# ``backward(create_graph=True)`` and the reference cycle
# -------------------------------------------------------
# :meth:`torch.Tensor.backward` stores the gradient in ``x.grad``; with ``create_graph=True``
# that gradient's graph ends in ``x``'s own accumulator, which refers to ``x``: a cycle through
# C++ objects that Python's garbage collector cannot break. PyTorch warns:
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    Exp.apply(x).sum().backward(create_graph=True)
for warning in caught:
    print(f"{warning.category.__name__}: {warning.message}")
x.grad = None

# %%
# The leak, counted
# -----------------
# A function makes a parameter, calls ``backward(create_graph=True)`` and returns nothing but a
# weak reference to it. Unless it resets ``.grad`` first (here with ``optimizer.zero_grad()``,
# which sets it to ``None``), the parameter, its gradient and the saved output stay allocated
# after the function returns and the collector has run.
import gc
import weakref


def train_step(reset_grad):
    parameter = torch.linspace(-2, 2, 100_000, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the warning shown above
        Exp.apply(parameter).sum().backward(create_graph=True)
    if reset_grad:
        torch.optim.SGD([parameter]).zero_grad()
    return weakref.ref(parameter)


for reset_grad in (False, True):
    parameter_ref, held = held_memory(partial(train_step, reset_grad))
    gc.collect()
    alive = parameter_ref() is not None
    print(
        f"zero_grad(): {reset_grad!s:5}  parameter alive: {alive!s:5}  leaked: {held:,} bytes"
    )

# %%
# The fix is the warning's: use :func:`torch.autograd.grad` when you build a graph (nothing is
# stored on the parameter), or set ``.grad = None`` after use, as ``zero_grad()`` did above.
#
# Checkpointing with ``use_reentrant=True``
# -----------------------------------------
# :func:`torch.utils.checkpoint.checkpoint` keeps only a block's inputs and recomputes its
# forward during backward. The older reentrant implementation refuses
# :func:`torch.autograd.grad` outright:
from torch.utils.checkpoint import checkpoint


def block(inputs):
    return Exp.apply(sinh(inputs))


loss = checkpoint(block, x, use_reentrant=True).sum()
try:
    torch.autograd.grad(loss, x, create_graph=True)
except RuntimeError as error:
    print(f"grad through a reentrant checkpoint: RuntimeError: {error}")

# %%
# ... and ``backward(create_graph=True)`` through it is silently first-order
# --------------------------------------------------------------------------
# The message suggests ``.backward()``. That runs, and ``x.grad`` holds the right first
# derivative, but the reentrant checkpoint ran its backward without recording it: the gradient
# has no ``grad_fn``, so there is no second derivative to take.
with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", UserWarning
    )  # the reference-cycle warning shown above
    checkpoint(block, x, use_reentrant=True).sum().backward(create_graph=True)
print(f"x.grad: {x.grad.numpy().round(4)}  grad_fn: {x.grad.grad_fn}")
try:
    x.grad.sum().backward()
except RuntimeError as error:
    print(f"second backward: RuntimeError: {error}")
x.grad = None


# %%
# ``use_reentrant=False`` gives the second derivative
# ---------------------------------------------------
# The non-reentrant checkpoint recomputes the forward under the backward's grad mode, so the
# recomputed graph is recorded and double backward works. Checked against native
# ``exp(sinh(x))``, differentiated twice:
def second_derivative(fn, inputs):
    (grad,) = torch.autograd.grad(fn(inputs).sum(), inputs, create_graph=True)
    return torch.autograd.grad(grad.sum(), inputs)[0]


checkpointed = second_derivative(lambda i: checkpoint(block, i, use_reentrant=False), x)
native = second_derivative(lambda i: torch.exp(torch.sinh(i)), x)
print(f"checkpointed d2y/dx2: {checkpointed.numpy().round(4)}")
print(f"native       d2y/dx2: {native.numpy().round(4)}")
torch.testing.assert_close(checkpointed, native)

# %%
# What the checkpoint saves, and what double backward gives back
# ---------------------------------------------------------------
# On the 100 000-value input, the checkpointed block holds no saved tensor after the forward,
# only the random-number generator state it restores before recomputing
# (``torch.get_rng_state()``: 5,056 bytes on the CPU). The ``create_graph=True`` backward
# recomputes the forward and keeps what the second backward needs: still less than without the
# checkpoint, on this block.
print(f"CPU generator state: {torch.get_rng_state().nbytes:,} bytes")
for label, fn in [
    ("plain", block),
    ("checkpoint", lambda i: checkpoint(block, i, use_reentrant=False)),
]:
    loss, after_forward = held_memory(partial(lambda f: f(big_x).sum(), fn))
    (grad,), after_backward = held_memory(
        partial(torch.autograd.grad, loss, big_x, create_graph=True)
    )
    total = after_forward + after_backward - loss.nbytes - grad.nbytes
    print(
        f"{label:10} after forward: {after_forward - loss.nbytes:>9,} bytes;"
        f" with the create_graph backward: {total:>9,} bytes"
    )

# %%
# Conclusion
# ----------
# A backward frees what it walks. Pass ``retain_graph=True`` to every backward through a graph
# but the last one, take first-order gradients before the second backward, prefer
# :func:`torch.autograd.grad` to ``backward(create_graph=True)``, and checkpoint with
# ``use_reentrant=False``. Each gradient made with ``create_graph=True`` keeps its graph's saved
# tensors alive for as long as you hold it.
#
# Next: what happens to saved tensors edited in place, in
# :doc:`/auto_examples/writing/plot_10_inplace_and_views`, and
# how the applications hold their graphs, in
# :doc:`/auto_examples/builtins_and_models/plot_15_applications`.
