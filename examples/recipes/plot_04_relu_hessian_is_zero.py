r"""
A ReLU network's second derivative is zero
==========================================

A physics-informed loss on a second derivative that never moves, a curvature penalty that is
always zero: with ReLU activations, the network is piecewise linear in its input, so its
second derivative with respect to the input is exactly zero wherever it exists. Nothing raises.
This page shows it, shows that a penalty on the *first* derivative still trains, and what a
smooth activation changes.
"""

# %%
# The input Hessian of a ReLU network
# -----------------------------------
# Between the kinks, every layer is linear and ReLU passes or zeroes its input: the
# network is an affine function there, and its Hessian in the input is zero. ``torch.func``
# computes it exactly.
import torch


def network(activation, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(2, 32), activation(), torch.nn.Linear(32, 32), activation(),
        torch.nn.Linear(32, 1),
    ).double()  # fmt: skip


relu_net = network(torch.nn.ReLU)
x = torch.randn(2, dtype=torch.float64)
hessian = torch.func.hessian(lambda t: relu_net(t).squeeze())(x)
print(f"ReLU network, input Hessian at x:\n{hessian.detach().numpy()}")

# %%
# Along a line through the input space, the ReLU network is a chain of straight pieces and
# its second derivative is zero everywhere the plot samples; a tanh network of the same
# shape curves.
import matplotlib.pyplot as plt

t = torch.linspace(-3, 3, 301, dtype=torch.float64)
direction = torch.tensor([1.0, 0.5], dtype=torch.float64)


def along_line(net):
    """u(t d) and d^2u/dt^2 along the line through 0 with direction d."""
    line = (t[:, None] * direction).requires_grad_()
    u = net(line).squeeze(1)
    (grad,) = torch.autograd.grad(u.sum(), line, create_graph=True)
    slope = grad @ direction
    (grad2,) = torch.autograd.grad(slope.sum(), line, allow_unused=True)
    curvature = torch.zeros_like(t) if grad2 is None else grad2 @ direction
    return u.detach(), curvature.detach()


fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
for name, net in (("ReLU", relu_net), ("tanh", network(torch.nn.Tanh))):
    u, curvature = along_line(net)
    left.plot(t, u, label=name)
    right.plot(t, curvature, label=name)
left.set(title="u along the line", xlabel="t")
right.set(title="second derivative along the line", xlabel="t")
right.legend()
plt.show()

# sphinx_gallery_thumbnail_number = 1

# %%
# A PINN loss on the Laplacian then has no gradient
# -------------------------------------------------
# The residual of :math:`\Delta u = f` sees :math:`\Delta u = 0` at every point, whatever the
# weights: its gradient with respect to the weights is zero, and the optimiser cannot fit
# :math:`f`.


def laplacian(net, points):
    points = points.detach().requires_grad_()
    (grad,) = torch.autograd.grad(net(points).sum(), points, create_graph=True)
    return sum(
        torch.autograd.grad(grad[:, i].sum(), points, create_graph=True)[0][:, i]
        for i in range(points.shape[1])
    )


points = torch.randn(64, 2, dtype=torch.float64)
forcing = torch.ones(64, dtype=torch.float64)


def residual_gradient_norm(net):
    loss = (laplacian(net, points) - forcing).pow(2).mean()
    grads = torch.autograd.grad(loss, list(net.parameters()), allow_unused=True)
    return sum(g.norm() ** 2 for g in grads if g is not None).sqrt().item()


print(f"ReLU: largest |laplacian| {laplacian(relu_net, points).abs().max().item():.1e}")
print(
    "ReLU: norm of the residual's gradient in the weights "
    f"{residual_gradient_norm(relu_net):.1e}"
)

# %%
# A penalty on the first derivative still trains
# ----------------------------------------------
# A gradient penalty (WGAN-GP, R1, a Lipschitz bound) differentiates :math:`\partial u /
# \partial x` with respect to the *weights*, not the input. That mixed derivative is not zero
# for ReLU: the slope of each linear piece is made of the weights.
inputs = points.detach().requires_grad_()
(grad_x,) = torch.autograd.grad(relu_net(inputs).sum(), inputs, create_graph=True)
penalty = (grad_x.norm(dim=1) - 1).pow(2).mean()
grads = torch.autograd.grad(penalty, list(relu_net.parameters()), allow_unused=True)
norm = sum(g.norm() ** 2 for g in grads if g is not None).sqrt().item()
print(f"ReLU: norm of the gradient penalty's gradient in the weights {norm:.3f}")

# %%
# Smooth activations
# ------------------
# Tanh, softplus and SiLU have a second derivative, so the network does too, and the PINN
# residual's gradient is back (the ReLU network's was exactly zero, not merely small).
for activation in (torch.nn.Tanh, torch.nn.Softplus, torch.nn.SiLU):
    net = network(activation)
    print(
        f"{activation.__name__:8}: largest |laplacian| "
        f"{laplacian(net, points).abs().max().item():.3f}, residual's gradient norm "
        f"{residual_gradient_norm(net):.3f}"
    )

# %%
# Conclusion
# ----------
# With ReLU, the input Hessian is zero: a loss on a second derivative, a Laplacian or a
# curvature term gives the weights no gradient, silently. A gradient penalty still works. For
# second-order losses in the input, use a smooth activation (tanh and SiLU are common in
# PINNs). ``double_backward.check`` reports such a zero as an answer, not a problem.
#
# Next: :doc:`plot_05_backward_calls_autograd_grad`.
