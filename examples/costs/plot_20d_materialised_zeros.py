r"""
Materialised zeros: what they cost ``Sinh``
===========================================

A Function that returns intermediates as extra outputs, as ``Sinh`` does, receives a gradient
for each of them in backward, even for those nobody used. By default autograd *materialises*
those gradients as tensors of zeros. This page shows what the zeros cost in kernels and time,
how they can turn an overflow into ``nan``, and how the package's ``Sinh`` avoids them.
"""

# %%
# The tutorial's form
# -------------------
# :class:`~double_backward.functions.sinh_variants.SinhTutorial` returns :math:`e^{x}` and
# :math:`e^{-x}` as extra outputs but leaves ``set_materialize_grads`` at its default. Autograd
# then hands backward a tensor of zeros for each extra output nobody used, and backward
# multiplies them in. (Under ``torch.compile`` the package's ``Sinh`` gets zeros too:
# :doc:`/auto_examples/beyond_python/plot_19_torch_compile`.)
#
# .. literalinclude:: /../src/double_backward/functions/sinh_variants.py
#    :pyobject: SinhTutorial

# %%
# The kernels they add
# --------------------
# The tutorial's first backward allocates two ``zeros`` and runs two products of nothing. The
# package's :class:`~double_backward.Sinh` (``set_materialize_grads(False)``) gets ``None`` and
# skips them. The second backward sends gradients back through the extra outputs, and the
# tutorial's form runs its whole backward again, zeros included.
import torch

from double_backward import sinh
from double_backward.costs import aten_ops, backward_ops, ops_listing
from double_backward.functions.sinh_variants import sinh_tutorial


def show_ops(label, ops):
    print(ops_listing(label, ops))


for name, fn in (("tutorial", sinh_tutorial), ("Sinh", sinh)):
    first, second = backward_ops(fn, torch.randn(4))
    show_ops(f"{name}, first backward", first)
    show_ops(f"{name}, second backward", second)


# %%
# The time they cost
# ------------------
# :class:`~double_backward.functions.sinh_variants.SinhMaterialized` is
# :class:`~double_backward.functions.sinh_variants.SinhOutOfPlace` with the zeros materialised,
# and nothing else changed. Below, double backward time, custom / native, at each size, measured
# once on the machine of :doc:`/auto_examples/costs/plot_20b_time_against_size`.
from double_backward.costs import load_measurements, time_series

measurements = load_measurements()
settings = measurements["settings"]
times = measurements["devices"]["cpu"]["times"]
size_labels = "".join(f"{size:>8.0e}" for size in settings["sizes"])


def ratio_row(name: str, kind: str = "double_backward") -> str:
    """A case's time, custom / native, at each size."""
    ratios = time_series(times, name, kind)[1]
    return f"{name:<28}" + "".join(f"{ratio:>8.2f}" for ratio in ratios)


def ratios_at_target(kind):
    return {
        r["case"]: r["ratio"]
        for r in times
        if r["size"] == settings["target_size"] and r["kind"] == kind
    }


time_at_target = ratios_at_target("double_backward")
penalty_at_target = ratios_at_target("penalty_double_backward")

variants = ("Sinh, before: out of place", "Sinh, zeros materialised", "Sinh, tutorial form")
print(f"{'':<28}{size_labels}")
for name in variants:
    print(ratio_row(name))

# %%
# The same times, drawn: below the dotted line the custom Function is the faster.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, axes = plt.subplots(figsize=(5, 3), layout="constrained")
for name in variants:
    sizes, ratios = time_series(times, name)[:2]
    axes.plot(sizes, ratios, marker="o", label=name)
axes.axhline(1, color="gray", linestyle=":")
axes.set(xscale="log", xlabel="elements", ylabel="time, custom / torch.sinh")
axes.legend(fontsize="small")
plt.show()

# %%
# ... and can turn an overflow into ``nan``
# -----------------------------------------
# In float32, :math:`e^{100}` overflows to ``inf``. The zeros the tutorial's backward multiplies
# in then give :math:`0 \cdot \infty = \mathrm{nan}`, where :func:`torch.cosh` says ``inf``.
# (It is also ``inf`` from 88.7 on, where :math:`\sinh x` is still finite, because it saves
# :math:`e^{x}` rather than :math:`e^{x}/2`.)
from double_backward.functions.sinh_variants import sinh_materialized

x = torch.tensor([1.0, 89.0, 100.0], requires_grad=True)
print(f"{'':<19}{'y at x = 1, 89, 100':^27} | {'dy/dx at x = 1, 89, 100':^27}")
for name, fn in (("tutorial form", sinh_tutorial), ("zeros materialised", sinh_materialized),
                 ("package Sinh", sinh), ("torch.sinh", torch.sinh)):
    y = fn(x)
    (grad_x,) = torch.autograd.grad(y.sum(), x)
    values = "".join(f"{v:9.3g}" for v in y.tolist())
    grads = "".join(f"{g:9.3g}" for g in grad_x.tolist())
    print(f"{name:<19}{values} | {grads}")

# %%
# The package's ``Sinh``: before and after
# ----------------------------------------
# An earlier form of the package's ``Sinh`` built each exponential out of place (``x - ln 2``,
# then its exponential, each a new tensor); it is kept as
# :class:`~double_backward.functions.sinh_variants.SinhOutOfPlace`. Forward runs in no-grad
# mode, so ``exp_`` may overwrite the fresh ``x - ln 2``, and backward adds each product with
# ``torch.addcmul``. Same saved tensors, fewer allocations:
#
# .. literalinclude:: /../src/double_backward/functions/saving_intermediates.py
#    :pyobject: Sinh.forward
from double_backward.functions.sinh_variants import sinh_out_of_place

x = torch.randn(4)
for name, fn in (("before", sinh_out_of_place), ("after", sinh)):
    show_ops(f"{name}, forward", aten_ops(lambda fn=fn: fn(x)))
for size in settings["sizes"][-3:]:
    before, after = (
        time_series(times, name)[1][settings["sizes"].index(size)]
        for name in ("Sinh, before: out of place", "Sinh")
    )
    print(f"double backward at {size:.0e}: before {before:.2f}x, after {after:.2f}x "
          "torch.sinh")


# %%
# Next
# ----
# ``set_materialize_grads(False)`` keeps extra outputs from costing zeros, time and ``nan``, in
# eager mode. Saving intermediates still costs memory for as long as the graph lives; when
# recomputing them is the better trade: :doc:`/auto_examples/costs/plot_20e_recompute_or_save`.
