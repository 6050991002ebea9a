r"""
cdist's size trap
=================

``torch.cdist`` raises in a gradient penalty at some input sizes and not at others: in torch
2.13, for p = 2 when neither input has more than 25 rows, and for any other p. This page shows
the trap, draws where it is, and fixes it twice. Then a few rows of the table of every built-in
whose double backward raises, run again here.
"""

# %%
# The trap
# --------
# ``torch.cdist`` with p = 2 switches kernel by size: when either input has more than 25
# rows it computes distances through a matrix product, whose double backward exists;
# otherwise, and for every other p, a direct kernel whose backward ``_cdist_backward`` has
# none. A penalty that passes at batch 32 fails at batch 16. That is torch 2.13, which builds
# this page; torch 2.14.1 differentiates ``_cdist_backward``, and the penalty runs at every
# size (:doc:`/builtins` lists the sizes tried and compares the releases' scans).


import math

import torch
from torch import nn

from double_backward import ops


def metric_penalty(batch, **kwargs):
    torch.manual_seed(0)
    embed = nn.Linear(8, 4)
    x = torch.randn(batch, 8, requires_grad=True)
    z = embed(x)
    distances = torch.cdist(z, z.roll(1, dims=0), **kwargs)
    (grad_x,) = torch.autograd.grad(distances.sum(), x, create_graph=True)
    grad_x.pow(2).sum().backward()


for batch in (32, 16):
    try:
        metric_penalty(batch)
        print(f"batch {batch}: penalty backward ran")
    except NotImplementedError as error:
        print(f"batch {batch}: {type(error).__name__}: {error}")


# %%
# Where the trap is, drawn
# ------------------------
# The same penalty at every batch from 2 to 40 rows, on the torch release that built this page.
# In torch 2.13 it raises up to 25 rows and runs above.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
batches = range(2, 41)
ran = []
for batch in batches:
    try:
        metric_penalty(batch)
        ran.append(1)
    except NotImplementedError:
        ran.append(0)
figure, axes = plt.subplots(figsize=(5, 2.5), layout="constrained")
axes.scatter(batches, ran, c=["tab:green" if r else "tab:red" for r in ran])
axes.set(xlabel="batch (rows of each input)", yticks=[0, 1], ylim=(-0.5, 1.5),
         yticklabels=["raises", "runs"], title=f"cdist, p = 2, torch {torch.__version__}")
plt.show()

# %%
# The cdist fixes
# ---------------
# For p = 2, ``compute_mode="use_mm_for_euclid_dist"`` makes cdist take the matrix-product
# route at every size. For every p torch's cdist takes (p >= 0, or infinity),
# ``double_backward.ops.cdist`` differentiates to every order; below p = 1 it is not a norm
# (p = 0 counts the coordinates that differ, and its derivatives are all 0).
metric_penalty(16, compute_mode="use_mm_for_euclid_dist")
print('batch 16, compute_mode="use_mm_for_euclid_dist": penalty backward ran')
torch.manual_seed(0)
points = torch.randn(16, 4, requires_grad=True)
for p in (0.5, 1.0, 1.5, 2.0, 3.0, math.inf):
    (grad_points,) = torch.autograd.grad(
        ops.cdist(points, points.roll(1, dims=0), p=p).sum(), points, create_graph=True
    )
    grad_points.pow(2).sum().backward()
    print(f"batch 16, ops.cdist with p = {p}: penalty backward ran")
# p = 0 is a count, constant wherever it is differentiable: its gradient is exactly 0, with no
# graph behind it (as torch.round's), so every higher derivative is 0 too.
(grad_points,) = torch.autograd.grad(
    ops.cdist(points, points.roll(1, dims=0), p=0.0).sum(), points, create_graph=True
)
print(f"batch 16, ops.cdist with p = 0: gradient all zero: {bool(grad_points.eq(0).all())}, "
      f"has a graph: {grad_points.requires_grad}")

# %%
# The table
# ---------
# cdist and attention are not alone. :doc:`/builtins` lists every built-in whose double
# backward raises in each tested torch release, with the condition and the fix for each. It was
# found by running a gradient penalty through each op of torch's OpInfo database, in float64 and
# float32. A few of its rows, run again here:
import torch.nn.functional as F

rows = {
    "F.pdist": lambda t: F.pdist(t),
    "F.hardsigmoid": lambda t: F.hardsigmoid(t) ** 2,
    "F.multi_margin_loss": lambda t: F.multi_margin_loss(
        t, torch.tensor([0, 1, 2, 3, 0])
    ),
}
for name, fn in rows.items():
    t = torch.randn(5, 4, requires_grad=True)
    (grad_t,) = torch.autograd.grad(fn(t).sum(), t, create_graph=True)
    try:
        grad_t.pow(2).sum().backward()
        print(f"{name:22} penalty backward ran")
    except (RuntimeError, NotImplementedError) as error:
        print(f"{name:22} {type(error).__name__}: {error}")

# %%
# Conclusion
# ----------
# A built-in without a double backward fails the way a custom Function does: its backward
# leaves autograd. Find it with :func:`~double_backward.check_model` (it names the submodule,
# the op and the fix), switch the backend or the mode where torch has one that works, and
# otherwise replace the op by a custom Function whose backward is built from differentiable
# operations, as in :doc:`/auto_examples/tutorial/plot_03_saving_intermediates` and
# :doc:`/auto_examples/tutorial/plot_04_untracked_backward`.
# Next: the gradient penalty and other uses in
# :doc:`/auto_examples/builtins_and_models/plot_15_applications`; the errors by
# message in :doc:`/errors`.
