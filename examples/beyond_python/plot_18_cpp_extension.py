r"""
When backward is a C++ kernel
=============================

The tutorial's fourth case stands in NumPy for "a C++ extension". This page is the real thing:
a C++ extension, built when the page runs, whose backward is a hand-written loop that autograd
cannot see. The fix is the same as in :doc:`/auto_examples/tutorial/plot_04_untracked_backward`,
written in C++: wrap the backward kernel in a ``torch::autograd::Function`` of its own and
give it a backward in ATen ops.

Two versions of :math:`y = x^3` share the same two kernels: ``cube_untracked``, whose backward
calls the kernel directly (first order only), and ``cube``, whose backward calls a second C++
Function, so second and third derivatives work. Building them needs a C++ compiler (``g++``
or ``clang++``) and this Python's headers (``Python.h``: ``python3-dev`` on Debian and
Ubuntu); ``ninja``, which runs the build, comes with the package's ``cpp`` extra. The
downloads check for the compiler and the headers before anything else.
"""

# %%
# The backward kernel
# -------------------
# A loop over raw pointers computes :math:`\bar{x} = 3x^2\,\bar{y}` for float32 and float64.
# Autograd records nothing of it: the result is a fresh tensor, written element by element.
# (The forward kernel, ``cube_kernel``, is the same loop for :math:`x^3`.)
#
# .. literalinclude:: /../src/double_backward/functions/csrc/cube.cpp
#    :language: cpp
#    :start-at: // The backward kernel: grad_x
#    :end-before: using torch::autograd::AutogradContext;
#
# Building the extension
# ----------------------
# :func:`~double_backward.functions.cpp_extension.load_extension` compiles ``cube.cpp`` with
# :func:`torch.utils.cpp_extension.load` the first time it runs on a machine, into a cache
# keyed by the source, the torch version and the Python ABI. Later runs import the compiled
# library from there.
from double_backward.functions.cpp_extension import load_extension

build = load_extension()
exported = sorted(name for name in dir(build.module) if not name.startswith("_"))
print(f"the extension exports: {', '.join(exported)}")

# %%
# Version 1: backward calls the kernel (broken for double backward)
# -----------------------------------------------------------------
# ``CubeUntracked`` is **broken for double backward, do not copy it**: its backward returns the
# kernel's result directly.
#
# .. literalinclude:: /../src/double_backward/functions/csrc/cube.cpp
#    :language: cpp
#    :start-at: // BROKEN for double backward
#    :end-before: // The backward kernel as a Function
#
# Its first derivative matches the native ``x**3`` (both in float64):
import torch

from double_backward.functions.cpp_extension import cube_untracked

x = torch.tensor([-2.0, -0.5, 0.0, 1.5], dtype=torch.float64, requires_grad=True)
(untracked_grad_x,) = torch.autograd.grad(cube_untracked(x).sum(), x, create_graph=True)
(native_grad_x,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)
print(f"x:                {x.tolist()}")
print(f"dy/dx, C++:       {untracked_grad_x.tolist()}")
print(f"dy/dx, native:    {native_grad_x.tolist()}")
torch.testing.assert_close(untracked_grad_x, native_grad_x.detach())

# %%
# ... but its second derivative fails, loudly or silently
# -------------------------------------------------------
# Even with ``create_graph=True``, the gradient the kernel wrote has no ``grad_fn``: there is
# nothing to differentiate. When the C++ Function's output is the whole loss, asking for the
# second derivative raises:
print(f"grad_x.grad_fn: {untracked_grad_x.grad_fn}")
try:
    torch.autograd.grad(untracked_grad_x.sum(), x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# In a model the loss has other terms. Beside one that reaches ``x`` (here ``x**2``), the
# gradient has a graph through that term, nothing raises, and the Function's share of the
# second derivative, :math:`6x`, is silently missing:
(beside_grad_x,) = torch.autograd.grad(
    cube_untracked(x).sum() + (x**2).sum(), x, create_graph=True
)
(beside,) = torch.autograd.grad(beside_grad_x.sum(), x)
print(f"d2/dx2 of cube_untracked(x) + x**2: {beside.tolist()}")
print(f"right (6x + 2):                     {(6 * x.detach() + 2).tolist()}")

# %%
# Version 2: the kernel wrapped in its own Function
# -------------------------------------------------
# ``Cube``'s backward calls ``CubeBackward::apply`` instead of the kernel. Autograd cannot look
# inside the kernel, but it records the call, and ``CubeBackward``'s backward gives the
# derivatives of :math:`g = 3x^2\,\bar{y}` in both its inputs with ATen ops, which autograd
# records too: :math:`\partial g/\partial\bar{y} = 3x^2` and
# :math:`\partial g/\partial x = 6x\,\bar{y}`.
#
# .. literalinclude:: /../src/double_backward/functions/csrc/cube.cpp
#    :language: cpp
#    :start-at: // The backward kernel as a Function
#    :end-before: PYBIND11_MODULE
#
# First, second and third derivative against the native op
# ----------------------------------------------------------
from double_backward.functions.cpp_extension import cube

(grad_x,) = torch.autograd.grad(cube(x).sum(), x, create_graph=True)
(grad2_x,) = torch.autograd.grad(grad_x.sum(), x, create_graph=True)
(grad3_x,) = torch.autograd.grad(grad2_x.sum(), x, retain_graph=True)
(native_grad2_x,) = torch.autograd.grad(native_grad_x.sum(), x, create_graph=True)
(native_grad3_x,) = torch.autograd.grad(native_grad2_x.sum(), x)
for order, ours, native in [
    ("dy/dx    ", grad_x, native_grad_x),
    ("d2y/dx2  ", grad2_x, native_grad2_x),
    ("d3y/dx3  ", grad3_x, native_grad3_x),
]:
    print(f"{order} C++: {ours.tolist()}  native: {native.tolist()}")
    torch.testing.assert_close(ours, native)

# %%
# The graph of ``grad_x``
# -----------------------
# ``grad_x`` is the output of the C++ node ``CppNode<CubeBackward>``, which leads back to ``x``.
# (torchviz would label every C++ node ``CppFunction``; the graph helper uses their C++ names.
# Colours: :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`. ``retain_graph=True`` above kept
# the saved tensors
# it shows: :doc:`/auto_examples/writing/plot_09_graph_lifetime`.)
from double_backward.graph import autograd_graph

# sphinx_gallery_thumbnail_number = 1
grad_x_graph = autograd_graph(
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x for the C++ cube: CppNode<CubeBackward> reaches x",
)
grad_x_graph

# %%
# gradcheck and gradgradcheck
# ---------------------------
# :func:`~torch.autograd.gradcheck` passes for both versions: their first derivatives are right.
# :func:`~torch.autograd.gradgradcheck` passes for ``cube`` and for ``cube_backward`` in each of
# its two inputs, and fails for ``cube_untracked``.
from torch.autograd import gradcheck, gradgradcheck

from double_backward.functions.cpp_extension import cube_backward

torch.manual_seed(0)
inputs = (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),)
grad_out_and_x = tuple(
    torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in "gx"
)
print(f"gradcheck(cube)               passed: {gradcheck(cube, inputs)}")
print(f"gradgradcheck(cube)           passed: {gradgradcheck(cube, inputs)}")
print(
    f"gradcheck(cube_backward)      passed: {gradcheck(cube_backward, grad_out_and_x)}"
)
print(
    f"gradgradcheck(cube_backward)  passed: {gradgradcheck(cube_backward, grad_out_and_x)}"
)
print(f"gradcheck(cube_untracked)     passed: {gradcheck(cube_untracked, inputs)}")
untracked_passed = gradgradcheck(cube_untracked, inputs, raise_exception=False)
print(f"gradgradcheck(cube_untracked) passed: {untracked_passed}")

# %%
# What the checker says
# ---------------------
# :func:`double_backward.check` runs these checks and more on each version.
import double_backward

for function in (cube, cube_untracked):
    report = double_backward.check(function, torch.randn(3, 3))
    problems = ", ".join(sorted(report.problem_names())) or "none"
    print(f"{function.__name__:15} ok: {report.ok!s:5}  problems: {problems}")

# %%
# C++ Functions and torch.func
# ----------------------------
# A C++ ``torch::autograd::Function`` works with ``torch.autograd``, but not with the
# :mod:`torch.func` transforms (``grad``, ``vmap``, ``jacrev``, ``hessian``). For those, call
# the kernels from a Python Function in the ``setup_context`` style, with the rules
# :doc:`/auto_examples/writing/plot_06_modern_api` shows.
try:
    torch.func.grad(lambda t: cube(t).sum())(x.detach())
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# Takeaway
# --------
# A C++ kernel is invisible to autograd exactly like NumPy is. Call it from a
# ``torch::autograd::Function`` of its own whose backward is written in ATen ops, and call that
# Function's ``apply`` from the outer backward: then second, third and higher derivatives work,
# in C++ as in Python (:doc:`/auto_examples/tutorial/plot_04_untracked_backward`). Check both orders
# with
# :func:`~torch.autograd.gradgradcheck` or :func:`double_backward.check`, as for any Function.
# Next, compiling: :doc:`/auto_examples/beyond_python/plot_19_torch_compile`.
