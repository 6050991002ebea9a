r"""
``torch.compile`` and higher-order gradients
============================================

``torch.compile`` captures a function's forward with Dynamo and, through AOTAutograd, compiles
its first-order backward ahead of time. That covers training, but not double backward: a
gradient taken through a compiled function can be computed with ``create_graph=True``, and
then differentiating it again raises, unless the Function ran eagerly at a graph break. This
page runs each step with the package's Functions, then three ways around it: compile only the
first-order part, take higher orders in eager mode, or
take them with :mod:`torch.func` inside the compiled function.

The ``aot_eager`` backend is used throughout: it runs AOTAutograd, where the limit lives, but
skips inductor's code generation. The default inductor backend is not run on this page.
"""

# %%
# Which Functions compile?
# ------------------------
# ``fullgraph=True`` turns a graph break into an error, so each line says whether Dynamo traced
# the Function into one graph (with ``torch._dynamo.reset()`` before each, so nothing is
# reused).
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
for name, fn in FUNCTIONS.items():
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
        verdict = "compiles into one graph"
    except Exception as error:
        lines = str(error).splitlines()
        reason = next((line.strip() for line in lines if "Explanation:" in line), "")
        verdict = f"{type(error).__name__}: {lines[0]}\n{'':23}{reason}"
    print(f"{name:22} {verdict}")

# %%
# What breaks the graph
# ---------------------
# Dynamo refuses a ``jvp`` staticmethod (the ``setup_context`` Functions of
# :doc:`/auto_examples/writing/plot_06_modern_api`). NumPy itself is not the problem: Dynamo traces
# NumPy arithmetic
# through ``torch._numpy``. What stops it in the tutorial's ``Cube`` is the
# ``np.errstate`` block that its NumPy backward uses to keep NumPy's overflow warning quiet:
import numpy as np


def numpy_arithmetic(t):
    return torch.from_numpy(3 * t.numpy() ** 2)


def numpy_with_errstate(t):
    with np.errstate(over="ignore"):
        return torch.from_numpy(3 * t.numpy() ** 2)


for fn in (numpy_arithmetic, numpy_with_errstate):
    torch._dynamo.reset()
    try:
        result = torch.compile(fn, backend="aot_eager", fullgraph=True)(x.detach())
        print(f"{fn.__name__:20} compiles: {result.tolist()}")
    except Exception as error:
        print(f"{fn.__name__:20} {type(error).__name__}: {str(error).splitlines()[0]}")

# %%
# Without ``fullgraph=True`` the Functions that break the graph run eagerly there, as the
# :doc:`/compatibility` shows. A custom operator is opaque and compiles
# (:doc:`/auto_examples/beyond_python/plot_17_custom_ops`).
#
# Compiled, ``sinh`` gets zeros where eager gets ``None``
# -------------------------------------------------------
# ``sinh`` compiles into one graph, but not with the same backward. The package's ``Sinh``
# calls ``ctx.set_materialize_grads(False)`` so that the extra outputs nobody used send
# ``None`` to backward, not zeros (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`). The
# compiled backward
# materialises the zeros anyway, and where :math:`e^x` overflows, :math:`0 \cdot \infty`
# turns the gradient into ``nan``. In float32:
x32 = torch.tensor([1.0, 89.0, 100.0], requires_grad=True)
torch._dynamo.reset()
compiled_sinh = torch.compile(sinh, backend="aot_eager")
for label, fn in [("eager sinh", sinh), ("compiled sinh", compiled_sinh),
                  ("torch.sinh", torch.sinh)]:
    (grad_x32,) = torch.autograd.grad(fn(x32).sum(), x32)
    print(f"{label:14} dy/dx at 1, 89, 100: {grad_x32.tolist()}")

# %%
# The compile time
# ----------------
# A compile costs far more than a call. The page prints a timing measured once, on the
# machine named below, not while the page was built: ``Square`` compiled with ``aot_eager``
# and run forward and backward, after ``torch._dynamo.reset()``, against one eager call.
from double_backward.costs import load_measurements

overhead = load_measurements("call_overhead")
compile_time = overhead["compile Square (aot_eager)"]
machine = overhead["machine"]
print(f"measured {overhead['date']}: {machine['cores']} CPUs, torch {machine['torch']}, "
      f"load average {machine['load_average_start'][0]}")
print(f"first compile in the process: {compile_time['first in the process s']:.2f} s")
print(f"later compiles, after reset:  {compile_time['after reset, best s']:.2f} to "
      f"{compile_time['after reset, worst s']:.2f} s")
print(f"one eager call:               {compile_time['eager call us']:.1f} us")

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
# The graph of that gradient: AOTAutograd's compiled backward is one node.
from double_backward.graph import autograd_graph

autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x through the compiled Square",
)

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
# The error is raised by the compiled backward itself, so it comes in the losses a model meets
# too, not only for the output alone: composed with a nonlinear op, and beside another term
# that reaches ``x``.
for label, loss in (("composed, sin(Square(x))", lambda t: compiled_square(t).sin().sum()),
                    ("beside x**3", lambda t: compiled_square(t).sum() + (t**3).sum())):
    (grad_in_loss,) = torch.autograd.grad(loss(x), x, create_graph=True)
    try:
        torch.autograd.grad(grad_in_loss.sum(), x)
        print(f"{label:25} second derivative computed")
    except RuntimeError as error:
        print(f"{label:25} RuntimeError: {str(error).splitlines()[0]}")

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
# Way around 3: the higher derivative inside the compiled function
# ----------------------------------------------------------------
# The error comes from autograd differentiating a compiled region a second time from outside.
# A function that computes its own second derivative with :mod:`torch.func` is traced whole,
# derivatives included, and AOTAutograd never meets a second backward. It needs Functions that
# :mod:`torch.func` accepts: the ``setup_context`` style
# (:doc:`/auto_examples/writing/plot_06_modern_api`).
from torch.func import grad

from double_backward.functions import setup_context_style as modern


def second_derivative_of_cube(t):
    return grad(lambda u: grad(lambda w: modern.Cube.apply(w).sum())(u).sum())(t)


torch._dynamo.reset()
compiled_second = torch.compile(second_derivative_of_cube, backend="aot_eager", fullgraph=True)
print(
    f"compiled d2/dx2 of Cube: {compiled_second(x.detach()).tolist()}"
    f"  (6x = {(6 * x).tolist()})"
)

# %%
# Takeaway
# --------
# ``torch.compile`` handles forward and first-order backward, including ``create_graph=True``,
# but not a second backward through the compiled region from outside. Compile what needs one
# derivative and keep in eager mode what needs two, or take every derivative inside the
# compiled function with :mod:`torch.func`; check where your Functions stand in the
# :doc:`/compatibility`. Wrapping outside code for compile:
# :doc:`/auto_examples/beyond_python/plot_17_custom_ops`. Next,
# what each way of writing a Function costs: :doc:`/auto_examples/costs/plot_20_costs`.
