r"""
Second derivatives inside an evaluation loop
============================================

A PINN residual, a Jacobian or a gradient penalty computed while validating fails with
``element 0 of tensors does not require grad and does not have a grad_fn``, although the same
code works in training. Nothing is wrong with the model: the loop around it turned grad mode
off. This page shows the two ways loops do it, ``torch.no_grad`` and ``torch.inference_mode``,
and what turns each back on.
"""

# %%
# A residual that needs the second derivative
# -------------------------------------------
# The model is a small network :math:`u(x)`; the residual of
# :math:`\mathrm{d}^2 u / \mathrm{d}x^2 = f` needs the second derivative, a gradient of a
# gradient. In training, with grad mode on, it works.
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def second_derivative(model, x):
    x = x.detach().requires_grad_()
    u = model(x)
    (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), x)
    return d2u


x = torch.linspace(0, 1, 4).unsqueeze(1)
print(f"u'' in training: {second_derivative(model, x).squeeze().numpy().round(4)}")

# %%
# In training, the first derivative has a graph back to ``x``: that is what the second
# ``autograd.grad`` differentiates, and what an evaluation loop's grad mode takes away.
from double_backward.graph import autograd_graph

x_leaf = x.detach().requires_grad_()
(du,) = torch.autograd.grad(model(x_leaf).sum(), x_leaf, create_graph=True)
autograd_graph({"du": du}, {"x": x_leaf}, title="Graph of du/dx for the network, in training")

# %%
# Under ``torch.no_grad``: the error
# ----------------------------------
# An evaluation loop usually wraps the batch in ``torch.no_grad()``. No graph is recorded, so
# the first ``autograd.grad`` has nothing to differentiate:
try:
    with torch.no_grad():
        second_derivative(model, x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# ``torch.enable_grad()`` turns ``no_grad`` off for its block, and the result is the one
# training gets:
with torch.no_grad():
    with torch.enable_grad():
        d2u = second_derivative(model, x)
print(f"u'' under no_grad + enable_grad: {d2u.squeeze().numpy().round(4)}")
print(f"same as in training: {torch.equal(d2u, second_derivative(model, x))}")

# %%
# Under ``torch.inference_mode``: ``enable_grad`` is not enough
# -------------------------------------------------------------
# ``torch.inference_mode()`` is stricter. ``torch.enable_grad()`` inside it changes nothing:
# operations still record no graph, and the same error comes back.
try:
    with torch.inference_mode():
        with torch.enable_grad():
            second_derivative(model, x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# ``torch.inference_mode(False)`` leaves it. But a tensor made while inference mode was on
# (a batch the loop handed over) is an *inference tensor*: ``x.detach()`` keeps it one, and
# outside inference mode it may not be made to require grad:
with torch.inference_mode():
    batch = torch.linspace(0, 1, 4).unsqueeze(1)
print(f"batch is an inference tensor: {batch.is_inference()}")
try:
    with torch.inference_mode(False):
        second_derivative(model, batch)
except RuntimeError as error:
    print(f"RuntimeError: {str(error).splitlines()[0]}")

# %%
# A clone made outside inference mode is a normal tensor, and the second derivative is back:
with torch.inference_mode(False):
    d2u = second_derivative(model, batch.clone())
print(f"u'' from a clone of the batch: {d2u.squeeze().numpy().round(4)}")

# %%
# In PyTorch Lightning
# --------------------
# Lightning's ``Trainer`` runs ``validation_step``, ``test_step`` and ``predict_step`` under
# ``torch.inference_mode()`` by default (its ``inference_mode=True`` argument). So
# ``torch.enable_grad()`` in the step is not enough, as above. Pass
# ``Trainer(inference_mode=False)``, which makes Lightning use ``torch.no_grad()`` instead,
# and wrap the computation in ``torch.enable_grad()`` inside the step:
#
# .. code-block:: python
#
#    class PINN(lightning.LightningModule):
#        def validation_step(self, batch, batch_idx):
#            with torch.enable_grad():
#                residual = second_derivative(self.model, batch) - forcing(batch)
#            self.log("val_residual", residual.pow(2).mean())
#
#    trainer = lightning.Trainer(inference_mode=False)
#
# This site does not run Lightning; the two lines it needs are the ``no_grad`` and
# ``enable_grad`` shown working above.

# %%
# Conclusion
# ----------
# "does not require grad" from code that works in training means grad mode was off around
# it. Under ``no_grad``, ``enable_grad()`` fixes it; under ``inference_mode``, leave inference
# mode (``inference_mode(False)``, or a loop that uses ``no_grad``) and clone the tensors made
# inside it. Every message here is in the :doc:`/errors`.
#
# Next: :doc:`plot_02_inductor_donated_buffers`, when the compiler is what refuses.
