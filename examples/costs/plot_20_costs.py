r"""
What it costs
=============

Saving an input, saving an output, returning intermediates as extra outputs, recomputing in
backward: each way of writing a double-differentiable Function has a price in time and memory.
This page counts the memory: the bytes each Function of the package keeps for backward, against
the native op it reimplements. The bytes are counted while the page is built; they are exact
and the same on every machine.

The pages after it measure time: :doc:`/auto_examples/costs/plot_20b_time_against_size` (the
overview),
:doc:`/auto_examples/costs/plot_20c_fewer_kernels`,
:doc:`/auto_examples/costs/plot_20d_materialised_zeros`,
:doc:`/auto_examples/costs/plot_20e_recompute_or_save` and
:doc:`/auto_examples/costs/plot_20f_attention_costs`. (The plots are drawn by
:mod:`double_backward.cost_plots` with matplotlib, which the package's ``plots`` extra
installs.)
"""

# %%
# What each Function keeps for backward
# -------------------------------------
# :func:`~double_backward.costs.saved_tensors` records every tensor packed for backward, one
# entry per storage. An *input* or the *output* costs nothing extra while the caller holds it.
# An *extra* tensor lives only for backward. The last column is what the ``create_graph=True``
# backward saves anew for the second backward; all are bytes per element of a float32 input.
import torch

from double_backward.costs import CASES, saved_tensors

n = 100_000
x = torch.randn(n)
saved = {case.name: saved_tensors(case.custom, x) for case in CASES}
print(f"{'Function':<28} {'saved by forward':<22} {'extra B/elt':>11} {'new B/elt':>9}")
for name, report in saved.items():
    roles = ", ".join(s.role for s in report.forward)
    print(f"{name:<28} {roles:<22} {report.extra_bytes / n:>11.0f} "
          f"{report.new_in_backward_bytes / n:>9.0f}")

# %%
# The native ops, for comparison: ``x**2`` and ``x**3`` save their input, :func:`torch.exp`
# its output, :func:`torch.sinh` its input. None saves an extra tensor.
natives = {case.native_name: case.native for case in CASES}
for name, native in natives.items():
    report = saved_tensors(native, x)
    roles = ", ".join(s.role for s in report.forward)
    print(f"{name:<28} {roles:<22} {report.extra_bytes / n:>11.0f} "
          f"{report.new_in_backward_bytes / n:>9.0f}")

# %%
# Saving an input the caller drops
# --------------------------------
# An input costs nothing extra only while the caller holds it. In ``y = f(g(x))`` the caller
# keeps ``x`` and ``y``, not ``g(x)``. If ``f`` saves its input, the graph keeps ``g(x)`` alive
# until backward, where it would have been freed at once. Below, ``g(x) = 2x``, and the count is
# the bytes the graph saved that the caller does not hold.
from double_backward import Exp, Square


def kept_beyond_caller(step):
    """Bytes the graph saves that the caller's tensors do not hold, per float32 element."""
    saved = {}

    def pack(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    leaf = x.detach().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        held = step(leaf)  # what the caller keeps
    held_storages = {tensor.untyped_storage().data_ptr() for tensor in held}
    return sum(b for ptr, b in saved.items() if ptr not in held_storages) / n


def holds(f):
    return lambda leaf: (leaf, h := leaf * 2, f(h))  # the caller keeps g(x) too


def drops(f):
    return lambda leaf: (leaf, f(leaf * 2))  # the caller keeps x and y only


print(f"{'kept for backward, B/elt':<32}{'caller holds g(x)':>18}{'drops g(x)':>12}")
for label, f in [("Square (saves its input)", Square.apply),
                 ("native (2x)**2 (saves its input)", lambda t: t**2),
                 ("Exp (saves its output)", Exp.apply)]:
    print(f"{label:<32}{kept_beyond_caller(holds(f)):>18.0f}"
          f"{kept_beyond_caller(drops(f)):>12.0f}")

# %%
# So saving an input is free only where the caller keeps it anyway; saving the output is free
# either way, since the caller holds ``y`` to use it.

# %%
# Saved bytes, drawn
# ------------------
# The same numbers as bars. ``Sinh`` keeps its two halved exponentials (8 bytes per element
# beyond the input); the tutorial's form and the materialised variant also make the first
# backward save two tensors of zeros for the second.
import matplotlib.pyplot as plt

from double_backward.cost_plots import saved_bytes_figure

# sphinx_gallery_thumbnail_number = 1

saved_bytes_figure({
    name: (report.extra_bytes / n, report.new_in_backward_bytes / n)
    for name, report in saved.items()
})
plt.show()


# %%
# Next
# ----
# Saving an input or an output costs no extra memory; returning intermediates costs one tensor
# each. What the ways of writing a Function cost in time:
# :doc:`/auto_examples/costs/plot_20b_time_against_size`.
