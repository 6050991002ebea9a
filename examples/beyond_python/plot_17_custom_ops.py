r"""
Code outside PyTorch, the modern way: custom operators
======================================================

The tutorial wraps a NumPy backward in a second :class:`torch.autograd.Function`
(:doc:`/auto_examples/tutorial/plot_04_untracked_backward`). Since PyTorch 2.4, PyTorch recommends
:func:`torch.library.custom_op` for Python code it cannot see (NumPy, SciPy): an operator with
a schema, whose derivative is registered with ``register_autograd``. (For a C++ or CUDA kernel
it recommends registering the operator from C++ with ``TORCH_LIBRARY``;
:doc:`/auto_examples/beyond_python/plot_18_cpp_extension` takes the C++ route with a
``torch::autograd::Function``.)
Double backward needs the same idea as before: the backward must itself be an operator with
its own autograd.

This page builds :math:`y = x^3` as two NumPy operators, checks them to the third order and with
:func:`torch.library.opcheck`, breaks the pattern on purpose, and compares, in one run, what the
custom operators and the tutorial's ``Cube`` give and cost.
"""

# %%
# Two operators, each with its own autograd
# -----------------------------------------
# ``cube`` computes :math:`x^3` in NumPy; its registered backward calls the second operator,
# ``cube_backward``, which computes :math:`3x^2\,\bar{y}` in NumPy too. ``cube_backward``'s own
# registered backward is written with torch operations, so autograd can go on from there.
# ``register_fake`` says what shape and dtype each returns without running NumPy.
#
# .. literalinclude:: /../src/double_backward/functions/custom_ops.py
#    :start-after: # -- cube ---
#    :end-before: def _batch_first
#
# .. literalinclude:: /../src/double_backward/functions/custom_ops.py
#    :start-after: # -- cube_backward ---
#    :end-before: @cube_backward.register_vmap
import torch

from double_backward.functions.custom_ops import cube, cube_backward

# sphinx_gallery_thumbnail_number = 1
x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(cube(x), x, create_graph=True)
(grad2_x,) = torch.autograd.grad(grad_x, x, create_graph=True)
(grad3_x,) = torch.autograd.grad(grad2_x, x)
print(f"dy/dx     at x = 1.5: {grad_x.item():.4f}  (analytic 3x^2 = {3 * 1.5**2:.4f})")
print(f"d2y/dx2   at x = 1.5: {grad2_x.item():.4f}  (analytic 6x   = {6 * 1.5:.4f})")
print(f"d3y/dx3   at x = 1.5: {grad3_x.item():.4f}  (analytic 6)")

# %%
# The graph of ``grad_x``
# -----------------------
# ``grad_x`` is the output of ``cube_backward``: its node is the backward PyTorch generated from
# ``register_autograd``, and it reaches ``x``. (Colours:
# :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.)
from double_backward.graph import autograd_graph

grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for the cube operator: cube_backward's node reaches x",
)
grad_x_graph

# %%
# gradcheck, gradgradcheck and opcheck
# ------------------------------------
# Both operators pass both numerical checks (``cube_backward`` in each of its inputs).
# :func:`torch.library.opcheck` tests the registrations themselves: the schema, that autograd is
# registered, that the fake implementation agrees with the real one, and that the operator
# traces under ``torch.compile``'s AOTAutograd.
from torch.autograd import gradcheck, gradgradcheck

torch.manual_seed(0)
xs = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
grad_out = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
print(f"gradcheck(cube)              passed: {gradcheck(cube, (xs,))}")
print(f"gradgradcheck(cube)          passed: {gradgradcheck(cube, (xs,))}")
print(
    f"gradgradcheck(cube_backward) passed: {gradgradcheck(cube_backward, (grad_out, xs))}"
)
for op, args in [(cube, (xs,)), (cube_backward, (grad_out, xs))]:
    print(f"opcheck({op._name}):")
    for test, result in torch.library.opcheck(op, args).items():
        print(f"    {test:28} {result}")

# %%
# Broken on purpose: a backward operator without autograd
# -------------------------------------------------------
# **Broken, do not copy.** ``cube_with_untracked_backward`` has a registered backward, but that
# backward calls ``cube_backward_without_autograd``, an operator nobody called
# ``register_autograd`` on:
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :start-after: # -- custom operators ---
#    :end-before: class LayerNormSavesStatistics
#
# The first derivative is right. The error comes at the second order, when autograd has to
# differentiate the backward operator:
from double_backward.functions.failures import cube_with_untracked_backward

(broken_grad_x,) = torch.autograd.grad(
    cube_with_untracked_backward(x), x, create_graph=True
)
print(f"first order:  {broken_grad_x.item():.4f}  (analytic {3 * 1.5**2:.4f})")
try:
    torch.autograd.grad(broken_grad_x, x)
except RuntimeError as error:
    print(f"second order: RuntimeError: {error}")

# %%
# Unlike a backward that leaves no graph
# (:doc:`/auto_examples/beyond_python/plot_18_cpp_extension`), the recorded call
# is on every path back to ``x``, so the error comes in the losses a model meets too:
# composed with a nonlinear op, after a ReLU, and beside another term that reaches ``x``.
for label, loss in (
    ("composed, squared", lambda t: (cube_with_untracked_backward(t) ** 2).sum()),
    ("after relu", lambda t: torch.relu(cube_with_untracked_backward(t)).sum()),
    ("beside x**2", lambda t: cube_with_untracked_backward(t).sum() + (t**2).sum()),
):
    (grad_in_loss,) = torch.autograd.grad(loss(x), x, create_graph=True)
    try:
        torch.autograd.grad(grad_in_loss.sum(), x)
        print(f"{label:18} second derivative computed")
    except RuntimeError as error:
        print(f"{label:18} RuntimeError: {str(error).splitlines()[0][:60]}...")

# %%
# What the custom operators give: fake tensors and export
# -------------------------------------------------------
# ``torch.compile`` and ``torch.export`` trace with *fake tensors*, which have a shape and a dtype
# but no data. The tutorial's ``CubeBackward`` hands its input to NumPy, which needs data; the
# operator answers from ``register_fake``. Exported, the operator stays one named node.
from torch._subclasses.fake_tensor import FakeTensorMode

from double_backward import Cube, CubeBackward

with FakeTensorMode():
    fake = torch.empty(2, 3)
    print(
        f"cube_backward on fake tensors: shape {tuple(cube_backward(fake, fake).shape)}"
    )
    try:
        CubeBackward.apply(fake, fake)
    except RuntimeError as error:
        print(f"CubeBackward on fake tensors:  RuntimeError: {error}")


# %%
class Model(torch.nn.Module):
    def forward(self, t):
        return cube_backward(torch.ones_like(t), t)


program = torch.export.export(Model(), (torch.ones(3),))
calls = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
print(f"exported graph calls: {calls}")

# %%
# What they give: ``torch.compile`` without a graph break
# -------------------------------------------------------
# With ``fullgraph=True`` a graph break is an error. Dynamo traces plain NumPy arithmetic, but
# not the ``np.errstate`` block in the tutorial's ``Cube`` backward
# (:doc:`/auto_examples/beyond_python/plot_19_torch_compile`
# shows which NumPy breaks it), so without ``fullgraph`` it falls back to eager for that call.
# The operator is opaque to Dynamo, whatever its Python does, and compiles. (``aot_eager``
# keeps this page's build fast.)
for name, fn in [("cube operator", cube), ("Cube Function", Cube.apply)]:
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    try:
        (g,) = torch.autograd.grad(compiled(x), x)
        print(f"{name:14} fullgraph compile: first derivative {g.item():.4f}")
    except Exception as error:
        print(
            f"{name:14} fullgraph compile: {type(error).__name__}: {str(error).splitlines()[0]}"
        )

# %%
# What they do not give: ``torch.func``
# -------------------------------------
# ``register_autograd`` makes an old-style Function behind the scenes, and :mod:`torch.func`'s
# reverse-mode transforms refuse those, as they refuse the tutorial's ``Cube``. ``vmap`` works
# through the registered ``register_vmap`` rule. Forward mode (``jvp``, ``jacfwd``) is worse:
# there is no way to register a forward-mode rule, and the operator returns **zero tangents,
# silently**. The ``setup_context`` Functions of :doc:`/auto_examples/writing/plot_06_modern_api`
# support all of these.
registrations = [name for name in dir(cube) if name.startswith("register_")]
print(f"what a custom operator can register: {registrations}")

# %%
# None of those is a forward-mode rule. Run side by side with the native op:
batch = torch.tensor([[-1.5, 0.5], [2.0, 1.0]], dtype=torch.float64)
print(
    f"vmap(cube) matches x**3: {torch.allclose(torch.func.vmap(cube)(batch), batch**3)}"
)
try:
    torch.func.jacrev(cube)(batch[0])
except RuntimeError as error:
    print(f"jacrev(cube): RuntimeError: {str(error).splitlines()[0][:80]}...")
tangent = torch.func.jvp(cube, (batch[0],), (torch.ones(2, dtype=torch.float64),))[1]
print(
    f"jvp(cube) tangent: {tangent.tolist()}  (right answer 3x^2 = {(3 * batch[0] ** 2).tolist()})"
)

# %%
# What they cost: per-call overhead
# ---------------------------------
# Each call to a custom operator goes through the dispatcher (schema check, autograd key, Python
# kernel) before NumPy runs. The page prints a timing on a 100-element float64 tensor,
# measured once on the machine named below, not while the page was built.
from double_backward.costs import load_measurements

overhead = load_measurements("call_overhead")
machine = overhead["machine"]
print(f"measured {overhead['date']}: {machine['cores']} CPUs, torch {machine['torch']}, "
      f"load average {machine['load_average_start'][0]}")
for kind, row in overhead["calls"].items():
    print(f"{kind:17} Cube Function {row['Cube Function us']:6.1f} us, "
          f"cube operator {row['cube operator us']:6.1f} us "
          f"(operator / Function: {row['operator / Function']:.2f})")

# %%
# Takeaway
# --------
# Wrap outside code in a custom operator when it must run under ``torch.compile`` without a graph
# break, be exported, or be traced with fake tensors; give its backward an operator with its own
# ``register_autograd``, and double and higher backward work as with ``CubeBackward``. Keep a
# ``setup_context`` Function when you need :mod:`torch.func` or forward mode, and check which is
# which in the :doc:`/compatibility`. Next, the same pattern in C++:
# :doc:`/auto_examples/beyond_python/plot_18_cpp_extension`.
