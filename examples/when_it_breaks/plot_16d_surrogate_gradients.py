r"""
Checking a surrogate gradient
=============================

A *surrogate gradient* is a backward that is not the derivative of forward, on purpose: a
straight-through estimator, gradient reversal, a spiking neuron's smooth stand-in for a step.
A plain :func:`double_backward.check` reports such a first derivative as wrong. This page
shows the option that takes it as given and checks what double backward must still get right.
"""

# %%
# A straight-through estimator
# ----------------------------
# A straight-through estimator rounds in forward and passes ``grad_out`` through in backward.
# Its first derivative is wrong by design, so a plain check reports ``first-order``. With
# ``surrogate_gradient=True`` (``--surrogate-gradient`` on the command line) the first
# derivative is taken as given. The checker then tests that backward is linear in ``grad_out``,
# and that differentiating backward agrees with central differences of *your* backward. What
# that second derivative means, for gradient reversal and a VQ-VAE codebook too:
# :doc:`/auto_examples/writing/plot_12_surrogate_gradients`.
import torch

from double_backward import check


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out


torch.manual_seed(0)
x = torch.randn(4, 3) * 3
print(check(StraightThroughRound.apply, x).verdict)
print(check(StraightThroughRound.apply, x, surrogate_gradient=True))

# %%
# A spiking neuron's surrogate, broken
# ------------------------------------
# Spiking networks fire a step in forward and use the derivative of a sigmoid in backward.
# Saving that sigmoid from forward loses its own derivative: the surrogate mode finds it,
# since double backward no longer matches central differences of the backward.


class SpikeSavesSigmoid(torch.autograd.Function):  # BROKEN on purpose
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(torch.sigmoid(4 * x))  # an intermediate, the mistake
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (s,) = ctx.saved_tensors
        return grad_out * 4 * s * (1 - s)


print(check(SpikeSavesSigmoid.apply, torch.randn(4, 3), surrogate_gradient=True))

# %%
# The spike and its surrogate, drawn
# ----------------------------------
# Forward is a step; backward uses the derivative of :math:`\sigma(4x)`, a smooth bump where
# the step's derivative is zero or infinite.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
grid = torch.linspace(-2, 2, 401, requires_grad=True)
(surrogate,) = torch.autograd.grad(SpikeSavesSigmoid.apply(grid).sum(), grid)
figure, axes = plt.subplots(figsize=(5, 3), layout="constrained")
axes.plot(grid.detach(), SpikeSavesSigmoid.apply(grid).detach(), label="forward: a step")
axes.plot(grid.detach(), surrogate, label="backward: the surrogate")
axes.set(xlabel="x")
axes.legend()
plt.show()

# %%
# Next
# ----
# Complex inputs follow a convention of their own:
# :doc:`/auto_examples/when_it_breaks/plot_16e_complex_functions`.
