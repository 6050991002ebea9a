r"""
``torch.compile`` and higher-order gradients
============================================

``torch.compile`` captures a function's forward with Dynamo and, through AOTAutograd, compiles
its first-order backward ahead of time. That covers training, but not double backward: a
gradient taken through a compiled function can be computed with ``create_graph=True``, and then
differentiating it again raises. This page runs each step with the package's Functions, then
the two ways around it: compile only the first-order part, and take higher orders in eager mode.

The ``aot_eager`` backend is used throughout: it runs AOTAutograd, where the limit lives, but
skips inductor's code generation. With the default inductor backend, the first compile of
``Square`` (forward and backward, empty cache) took 17.5 s on the project's 2-core machine and
raised the same double-backward error (measured outside this page; the README has the run).
"""

# %%
# Which Functions compile?
# ------------------------
# ``fullgraph=True`` turns a graph break into an error, so each line says whether Dynamo traced
# the Function into one graph. Each compile is timed (with ``torch._dynamo.reset()`` before it,
# so nothing is reused).
import time

import torch

from double_backward import Cube, Exp, Square, sinh
from double_backward.functions import setup_context_style as modern
from double_backward.functions.custom_ops import cube
from double_backward.functions.higher_orders import Sin

FUNCTIONS = {
    "Square": Square.apply,
    "Exp": Exp.apply,
    "sinh": sinh,
    "Sin": Sin.apply,
    "Cube (NumPy backward)": Cube.apply,
    "modern Square (jvp)": modern.Square.apply,
    "cube custom operator": cube,
}
x = torch.tensor([-1.5, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
compile_seconds = {}
for name, fn in FUNCTIONS.items():
    torch._dynamo.reset()
    started = time.perf_counter()
    try:
        torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
        verdict = "compiles into one graph"
    except Exception as error:
        verdict = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    compile_seconds[name] = time.perf_counter() - started
    print(f"{name:22} {verdict}")

# %%
# Functions whose forward and backward are torch operations compile. Dynamo cannot trace NumPy
# (the tutorial's ``Cube``) or a ``jvp`` staticmethod (the ``setup_context`` Functions of
# :doc:`plot_06_modern_api`); without ``fullgraph=True`` those run eagerly at a graph break,
# as the :doc:`/compatibility` shows. A custom operator is opaque and compiles
# (:doc:`plot_17_custom_ops`).
#
# The compile time
# ----------------
# Measured above, on whatever machine builds this page. The exact seconds vary from build to
# build, so the page prints how they compare with one eager call; the README has the figures
# measured on the project's machine.
import timeit

eager_call = min(timeit.repeat(lambda: Square.apply(x), number=200, repeat=3)) / 200
fastest, slowest = min(compile_seconds.values()), max(compile_seconds.values())
print(f"each compile took over 1000 eager calls: {fastest > 1000 * eager_call}")
print(f"each compile took under a minute:        {slowest < 60}")

# %%
# First-order backward under compile
# ----------------------------------
# The compiled ``Square`` gives the same gradient as eager, with AOTAutograd's compiled backward
# as ``grad_fn``.
torch._dynamo.reset()
compiled_square = torch.compile(Square.apply, backend="aot_eager")
(grad_x,) = torch.autograd.grad(compiled_square(x).sum(), x)
print(f"compiled gradient: {grad_x.tolist()}  (2x = {(2 * x).tolist()})")

# %%
# ``create_graph=True`` under compile
# -----------------------------------
# Asking for a differentiable gradient also works: the gradient has a ``grad_fn``.
(grad_x,) = torch.autograd.grad(compiled_square(x).sum(), x, create_graph=True)
print(f"gradient {grad_x.tolist()}, grad_fn: {type(grad_x.grad_fn).__name__}")

# %%
# The double-backward error
# -------------------------
# Differentiating that gradient again is where compile stops. This is the message the
# :doc:`/errors` lists under "Double backward through torch.compile":
try:
    torch.autograd.grad(grad_x.sum(), x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# Way around 1: compile the first-order part only
# -----------------------------------------------
# A gradient penalty differentiates the critic twice and whatever feeds it once. So compile
# what feeds it (here a stand-in generator, :math:`2\tanh z`) and keep the critic (``Square``)
# in eager mode. The penalty :math:`\sum (\partial D/\partial u)^2 = 16 \sum \tanh^2 z`
# has the gradient :math:`32 \tanh z\,(1 - \tanh^2 z)`:
torch._dynamo.reset()
generator = torch.compile(lambda t: 2 * torch.tanh(t), backend="aot_eager")
z = x.detach().requires_grad_()
fake = generator(z)  # compiled: differentiated once
(grad_fake,) = torch.autograd.grad(Square.apply(fake).sum(), fake, create_graph=True)
penalty = grad_fake.pow(2).sum()  # eager critic: differentiated twice
(grad_z,) = torch.autograd.grad(penalty, z)
tanh_z = torch.tanh(z.detach())
print(f"d penalty / dz: {grad_z.numpy().round(6).tolist()}")
print(f"by hand:        {(32 * tanh_z * (1 - tanh_z**2)).numpy().round(6).tolist()}")


# %%
# The compiled generator was differentiated once, the eager critic twice: every backward that
# had to be differentiated again ran in eager mode.
#
# Way around 2: eager for the higher order
# ----------------------------------------
# When a Hessian-vector product is needed, call the same Function uncompiled for that step.
# ``torch._dynamo.disable`` keeps a helper eager even when it is called from compiled code.
@torch._dynamo.disable
def hessian_vector_product(fn, t, v):
    t = t.detach().requires_grad_()
    (grad_t,) = torch.autograd.grad(fn(t).sum(), t, create_graph=True)
    return torch.autograd.grad(grad_t, t, v)[0]


v = torch.ones_like(x)
hvp = hessian_vector_product(Cube.apply, x, v)
print(f"Hv for Cube, eager: {hvp.tolist()}  (6x = {(6 * x).tolist()})")

# %%
# Takeaway
# --------
# ``torch.compile`` handles forward and first-order backward, including ``create_graph=True``,
# but not a second backward through the compiled region. Compile what needs one derivative,
# keep in eager mode what needs two, and check where your Functions stand in the
# :doc:`/compatibility`. Wrapping outside code for compile: :doc:`plot_17_custom_ops`.
