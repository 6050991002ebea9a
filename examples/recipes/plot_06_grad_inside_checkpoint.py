r"""
``autograd.grad`` inside a checkpointed block
=============================================

Models that predict forces as the gradient of an energy, PINNs and some implicit layers call
``torch.autograd.grad(..., create_graph=True)`` *inside* their forward. Wrapped in
``torch.utils.checkpoint`` to save memory, that block must record a graph while it runs and
again when it is recomputed. ``use_reentrant=False`` does; ``use_reentrant=True`` runs the
block under ``torch.no_grad()`` and raises. This page shows both, against the same model
without checkpointing.
"""

# %%
# A block that differentiates inside
# ----------------------------------
# ``forces`` computes an energy from positions and returns its negative gradient. The loss
# compares forces with targets, so training differentiates a gradient: double backward.
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
energy = torch.nn.Sequential(
    torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
).double()


def forces(positions):
    (grad,) = torch.autograd.grad(energy(positions).sum(), positions, create_graph=True)
    return -grad


positions = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
target = torch.zeros(5, 3, dtype=torch.float64)


def weight_gradients(block):
    """The force loss's gradient in every parameter (zeros where none reaches one)."""
    energy.zero_grad()
    (block(positions) - target).pow(2).sum().backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone()
            for p in energy.parameters()]  # fmt: skip


reference = weight_gradients(forces)  # no checkpoint

# %%
# The graph of the forces, a gradient taken inside forward: the loss's backward runs
# through it to the weights.
from double_backward.graph import autograd_graph

autograd_graph(
    {"forces": forces(positions)},
    {"positions": positions},
    title="Graph of the forces, the energy's gradient, taken with create_graph=True",
)

# %%
# ``use_reentrant=False``: the same gradients
# -------------------------------------------
# The non-reentrant checkpoint runs the block with grad mode as the caller has it, saves
# nothing inside it, and recomputes it during backward with the graph the inner
# ``autograd.grad`` needs.
checkpointed = weight_gradients(lambda p: checkpoint(forces, p, use_reentrant=False))
same = all(torch.allclose(a, b) for a, b in zip(checkpointed, reference, strict=True))
print(f"use_reentrant=False, same weight gradients as without checkpoint: {same}")

# %%
# ``use_reentrant=True``: the error
# ---------------------------------
# The reentrant checkpoint runs the block's first pass under ``torch.no_grad()``, so the
# energy inside has no graph and the inner ``autograd.grad`` has nothing to differentiate:
try:
    weight_gradients(lambda p: checkpoint(forces, p, use_reentrant=True))
except RuntimeError as error:
    print(f"use_reentrant=True: RuntimeError: {error}")

# %%
# The reentrant variant also refuses ``torch.autograd.grad`` through it, even from outside:
try:
    torch.autograd.grad(checkpoint(energy, positions, use_reentrant=True).sum(), positions)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# Conclusion
# ----------
# A checkpointed block that takes gradients inside needs ``use_reentrant=False``. The error
# of the reentrant one is the grad-mode message of the :doc:`/errors`: its first pass runs
# with grad mode off.
#
# Next: :doc:`plot_07_gradient_penalty_with_gradscaler`, a gradient penalty in mixed
# precision.
