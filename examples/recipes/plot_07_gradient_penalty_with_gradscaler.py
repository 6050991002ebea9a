r"""
A gradient penalty with a GradScaler
====================================

In mixed precision, ``GradScaler`` multiplies the loss by a large scale so that small
gradients survive in float16, and divides the parameter gradients by it before the optimiser
step. A gradient penalty takes gradients with ``torch.autograd.grad`` itself, outside that
bookkeeping: taken from the scaled loss, they must be unscaled by hand before the penalty is
formed. This page runs the recipe of PyTorch's AMP examples, checks it against the same step
without scaling, and shows what forgetting to unscale does.
"""

# %%
# The model and the plain step
# ----------------------------
# A small regressor; the loss adds the norm of the gradient of the loss with respect to the
# parameters (the penalty of PyTorch's AMP examples). Without a scaler, in float32, as the
# reference: the parameter gradients after ``backward``.
import copy

import torch

from double_backward.graph import autograd_graph

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
inputs, targets = torch.randn(32, 8), torch.randn(32, 1)


def loss_of(net):
    return torch.nn.functional.mse_loss(net(inputs), targets)


def grads_of(net):
    return [p.grad.clone() for p in net.parameters()]


reference = copy.deepcopy(model)
loss = loss_of(reference)
grad_params = torch.autograd.grad(loss, list(reference.parameters()), create_graph=True)
grad_norm = torch.sqrt(sum(g.pow(2).sum() for g in grad_params))
penalty_graph = autograd_graph(  # drawn on the page
    {"grad_norm": grad_norm},
    dict(reference.named_parameters()),
    title="Graph of the gradient penalty's norm, without a scaler",
)
(loss + grad_norm).backward()
expected = grads_of(reference)

# %%
# The recipe
# ----------
# Take the penalty's gradients from the *scaled* loss (``scaler.scale(loss)``), so that they
# do not underflow in float16; divide them by the scale (``1 / scaler.get_scale()``); form
# the penalty from them, add it, and back-propagate the scaled total. ``scaler.step`` then
# unscales the parameter gradients as usual. ``GradScaler("cpu")`` here; on a GPU it is
# ``GradScaler("cuda")`` and the forward runs under ``torch.autocast("cuda")``.
scaled_model = copy.deepcopy(model)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
optimizer = torch.optim.SGD(scaled_model.parameters(), lr=0.0)  # lr 0: only the gradients

loss = loss_of(scaled_model)
scaled_grads = torch.autograd.grad(
    scaler.scale(loss), list(scaled_model.parameters()), create_graph=True
)
inv_scale = 1.0 / scaler.get_scale()
grad_params = [g * inv_scale for g in scaled_grads]
grad_norm = torch.sqrt(sum(g.pow(2).sum() for g in grad_params))
scaler.scale(loss + grad_norm).backward()
scaler.unscale_(optimizer)  # what scaler.step does first; done here to read the gradients
got = grads_of(scaled_model)
scaler.step(optimizer)
scaler.update()

close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got, expected, strict=True))
print(f"scale {2.0**16:.0f}: gradients equal the unscaled step's: {close}")

# %%
# Forgetting to unscale
# ---------------------
# Formed from the scaled gradients, the penalty is the scale times too large, and so is
# its share of the update: here 65,536 times.
wrong_model = copy.deepcopy(model)
loss = loss_of(wrong_model)
scaled_grads = torch.autograd.grad(
    scaler.scale(loss), list(wrong_model.parameters()), create_graph=True
)
wrong_norm = torch.sqrt(sum(g.pow(2).sum() for g in scaled_grads))
print(f"penalty, unscaled as in the recipe: {grad_norm.item():.6f}")
print(f"penalty from the scaled gradients : {wrong_norm.item():.1f} "
      f"(ratio {wrong_norm.item() / grad_norm.item():.0f})")  # fmt: skip

# %%
# Under autocast
# --------------
# The same step with the forward in bfloat16 (``torch.autocast("cpu")``, as float16 is on a
# GPU) runs, and its gradients stay within bfloat16's precision of the float32 reference.
amp_model = copy.deepcopy(model)
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = loss_of(amp_model)
scaled_grads = torch.autograd.grad(
    scaler.scale(loss), list(amp_model.parameters()), create_graph=True
)
inv_scale = 1.0 / scaler.get_scale()
grad_norm = torch.sqrt(sum((g * inv_scale).pow(2).sum() for g in scaled_grads))
scaler.scale(loss + grad_norm).backward()
got = [p.grad / scaler.get_scale() for p in amp_model.parameters()]
error = max(((a - b).norm() / b.norm()).item() for a, b in zip(got, expected, strict=True))
print(f"bfloat16 forward: largest relative difference from float32 {error:.1e}")

# %%
# Conclusion
# ----------
# With a ``GradScaler``: ``autograd.grad`` of ``scaler.scale(loss)`` with
# ``create_graph=True``, multiply those gradients by ``1 / scaler.get_scale()``, build the
# penalty from them, and ``scaler.scale(loss + penalty).backward()``. Any other order either
# underflows in float16 or scales the penalty by the scale.
#
# Next: the :doc:`/errors`, to find a message you met.
