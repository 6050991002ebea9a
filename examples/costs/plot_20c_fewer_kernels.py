r"""
Fewer kernels: why ``Square`` beats ``x**2``
============================================

A custom Function can be faster than the native op when its backward is simpler than the
native op's general derivative formula. This page lists the kernels each backward runs, for
``Square`` against ``x**2`` and ``Cube`` against ``x**3``, and sets them beside the measured
times of :doc:`/auto_examples/costs/plot_20b_time_against_size`.
"""

# %%
# The kernels each backward runs
# ------------------------------
# :func:`~double_backward.costs.backward_ops` lists the kernels each backward runs. ``x**2`` is
# :func:`torch.pow`, whose derivative formula is written for any exponent,
# ``grad · 2 · x.pow(1)``: its double backward differentiates a ``pow`` again. ``Square``'s
# backward is ``grad_out * 2 * x``, two multiplications whose own derivative is one more.
import torch

from double_backward import Square
from double_backward.costs import backward_ops, ops_listing


def show_ops(label, ops):
    print(ops_listing(label, ops))


for name, fn in (("Square", Square.apply), ("x**2", lambda t: t**2)):
    first, second = backward_ops(fn, torch.randn(4))
    show_ops(f"{name}, first backward", first)
    show_ops(f"{name}, second backward", second)

# %%
# Fewer kernels, less time
# ------------------------
# Fewer kernels means less memory traffic. With a ``grad_out`` that requires grad, the second
# backward also differentiates with respect to ``grad_out``: one more product on each side.
# The times, measured once at 1e6 elements, follow the listings.
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

for name, fn in (("Square", Square.apply), ("x**2", lambda t: t**2)):
    show_ops(f"{name}, second, grad_out req. grad",
             backward_ops(fn, torch.randn(4), grad_out_requires_grad=True)[1])
for name in ("Square", "Square (setup_context)"):
    print(f"{name:<24} double backward at 1e6: plain grad_out {time_at_target[name]:.2f}x, "
          f"grad_out requiring grad {penalty_at_target[name]:.2f}x x**2")


# %%
# ``Cube``: no gradient for an input that needs none
# --------------------------------------------------
# ``Cube``'s backward is :class:`~double_backward.CubeBackward`, which has two inputs,
# ``grad_out`` and ``x``. In a plain double backward ``grad_out`` does not require grad, so
# ``CubeBackward.backward`` checks ``ctx.needs_input_grad`` and skips the term
# :math:`3x^2\,\bar{g}` that autograd would throw away. The ``setup_context`` version still
# computes both; their times, custom / ``x**3``, follow.
from double_backward import Cube
from double_backward.functions.setup_context_style import Cube as CubeSetupContext

for name, fn in (
    ("Cube", Cube.apply),
    ("setup_context Cube", CubeSetupContext.apply),
):
    show_ops(f"{name}, second backward", backward_ops(fn, torch.randn(4))[1])
print(f"\n{'':<28}{size_labels}")
for name in ("Cube (NumPy backward)", "Cube (setup_context)"):
    print(ratio_row(name))

# %%
# In a gradient penalty, no saving
# --------------------------------
# In a gradient penalty or a composed loss ``grad_out`` requires grad, and ``needs_input_grad``
# says so. ``Cube`` then computes the term too: its second backward runs as many kernels as
# ``x**3``'s, and its time ratio rises.
for name, fn in (("Cube", Cube.apply), ("x**3", lambda t: t**3)):
    ops_in_penalty = backward_ops(fn, torch.randn(4), grad_out_requires_grad=True)[1]
    show_ops(f"{name}, second, grad_out req. grad", ops_in_penalty)
print(f"\n{'':<28}{size_labels}")
for name in ("Cube (NumPy backward)", "Cube (setup_context)"):
    print(ratio_row(name, "penalty_double_backward"))

# %%
# The kernel counts, drawn
# ------------------------
# The number of kernels in each second backward, from the listings above.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
counts = {}
for name, fn in (("Square", Square.apply), ("x**2", lambda t: t**2),
                 ("Cube", Cube.apply), ("x**3", lambda t: t**3)):
    counts[name] = [len(backward_ops(fn, torch.randn(4), grad_out_requires_grad=needs)[1])
                    for needs in (False, True)]
figure, axes = plt.subplots(figsize=(5, 3), layout="constrained")
positions = range(len(counts))
axes.bar([p - 0.2 for p in positions], [c[0] for c in counts.values()], 0.4,
         label="plain grad_out")
axes.bar([p + 0.2 for p in positions], [c[1] for c in counts.values()], 0.4,
         label="grad_out requiring grad")
axes.set_xticks(list(positions), list(counts))
axes.set(ylabel="kernels in the second backward",
         ylim=(0, 1.4 * max(max(c) for c in counts.values())))
axes.legend()
plt.show()

# %%
# Next
# ----
# ``Sinh`` returns intermediates as extra outputs, and how it handles their unused gradients
# costs time too: :doc:`/auto_examples/costs/plot_20d_materialised_zeros`.
