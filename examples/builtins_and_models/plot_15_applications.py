r"""
Where double backward is used
=============================

Four short applications, each built on one of this site's Functions and checked against the
same computation written with native torch operations: a Newton step solved with
Hessian-vector products, a WGAN-GP gradient penalty, a MAML meta-gradient, and a
physics-informed residual with a second derivative. Each needs the gradient of a gradient.
"""

# %%
# A Newton step with Hessian-vector products
# ------------------------------------------
# Minimise :math:`f(w) = \sum_i e^{w_i} - b \cdot w + \tfrac12 \lVert A w \rVert^2`, with
# :class:`~double_backward.Exp`. A Newton step solves :math:`H\,\delta = -\nabla f` by
# conjugate gradients, which needs only products :math:`Hv`: the gradient of
# :math:`\nabla f \cdot v`, a double backward. Every product runs through the same gradient's
# graph, hence ``retain_graph=True``: :doc:`/auto_examples/writing/plot_09_graph_lifetime`.
import torch

from double_backward import Exp

torch.manual_seed(0)
A = torch.randn(5, 5, dtype=torch.float64) / 3
b = torch.randn(5, dtype=torch.float64)


def objective(w, exp):
    return exp(w).sum() - b @ w + 0.5 * (A @ w).pow(2).sum()


def newton_step(w, exp, iterations=25):
    w = w.detach().requires_grad_()
    (gradient,) = torch.autograd.grad(objective(w, exp), w, create_graph=True)

    def hvp(v):  # gradient of (gradient . v): double backward through exp
        (product,) = torch.autograd.grad(gradient, w, v, retain_graph=True)
        return product

    step = torch.zeros_like(w)
    residual = -gradient.detach()
    direction = residual.clone()
    for _ in range(iterations):  # conjugate gradients on H step = -gradient
        h_direction = hvp(direction)
        alpha = residual @ residual / (direction @ h_direction)
        step, new_residual = step + alpha * direction, residual - alpha * h_direction
        if new_residual.norm() < 1e-12:
            break
        direction = (
            new_residual
            + (new_residual @ new_residual) / (residual @ residual) * direction
        )
        residual = new_residual
    return step


w0 = torch.zeros(5, dtype=torch.float64)
ours, native = newton_step(w0, Exp.apply), newton_step(w0, torch.exp)
print(f"Newton step with Exp:       {ours.numpy().round(6)}")
print(f"Newton step with torch.exp: {native.numpy().round(6)}")
torch.testing.assert_close(ours, native)
w = w0
for iteration in range(4):
    w = w + newton_step(w, Exp.apply)
    print(
        f"after Newton step {iteration + 1}: f(w) = {objective(w, torch.exp).item():.10f}"
    )

# %%
# A gradient penalty (WGAN-GP)
# ----------------------------
# The critic :math:`D(x) = v \cdot \sinh(W x)` uses :func:`~double_backward.sinh`. The penalty
# :math:`(\lVert \nabla_x D(\hat{x}) \rVert - 1)^2` contains a gradient; training the critic
# differentiates it with respect to :math:`W`: double backward. (A critic with attention
# needs more: :doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward`.)
from double_backward import sinh

W = torch.randn(4, 3, dtype=torch.float64)
v = torch.randn(4, dtype=torch.float64)
x_hat = torch.randn(
    8, 3, dtype=torch.float64
)  # points between real and generated samples


def penalty_gradient(activation):
    weights = W.clone().requires_grad_()
    points = x_hat.clone().requires_grad_()
    critic = (activation(points @ weights.T) @ v).sum()
    (grad_points,) = torch.autograd.grad(critic, points, create_graph=True)
    penalty = (grad_points.norm(dim=1) - 1).pow(2).mean()
    (grad_weights,) = torch.autograd.grad(penalty, weights)
    return penalty.item(), grad_weights


(penalty, ours), (_, native) = penalty_gradient(sinh), penalty_gradient(torch.sinh)
print(
    f"penalty: {penalty:.6f}; d penalty / dW matches torch.sinh: {torch.allclose(ours, native)}"
)
print(f"max |difference|: {(ours - native).abs().max():.1e}")

# %%
# The graph of the critic's input gradient with ``sinh``, which the penalty differentiates.
from double_backward.graph import autograd_graph

weights = W.clone().requires_grad_()
points = x_hat.clone().requires_grad_()
critic = (sinh(points @ weights.T) @ v).sum()
(grad_points,) = torch.autograd.grad(critic, points, create_graph=True)
autograd_graph(
    {"grad_points": grad_points},
    {"points": points, "W": weights},
    title="Graph of the critic's input gradient with sinh, for the gradient penalty",
)

# %%
# A MAML meta-gradient
# --------------------
# One inner gradient step on a task's training data, :math:`\theta' = \theta - \alpha \nabla
# L_{train}(\theta)`, then the loss on its test data. The meta-gradient
# :math:`dL_{test}(\theta')/d\theta` goes through the inner gradient: double backward through
# the squared error, here :class:`~double_backward.Square`.
from double_backward import Square

x_train, x_test = (
    torch.randn(10, 2, dtype=torch.float64),
    torch.randn(10, 2, dtype=torch.float64),
)
true_theta = torch.tensor([1.5, -0.5], dtype=torch.float64)
y_train, y_test = x_train @ true_theta, x_test @ true_theta


def meta_gradient(square, inner_rate=0.1):
    theta = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    train_loss = square(x_train @ theta - y_train).mean()
    (inner_grad,) = torch.autograd.grad(train_loss, theta, create_graph=True)
    adapted = theta - inner_rate * inner_grad
    test_loss = square(x_test @ adapted - y_test).mean()
    (meta_grad,) = torch.autograd.grad(test_loss, theta)
    return meta_grad


ours, native = meta_gradient(Square.apply), meta_gradient(lambda t: t**2)
print(f"meta-gradient with Square: {ours.numpy().round(6)}")
print(f"meta-gradient with x**2:   {native.numpy().round(6)}")
torch.testing.assert_close(ours, native)

# %%
# A physics-informed residual
# ---------------------------
# A small model :math:`u(t) = \sum_k a_k (w_k t + c_k)^3` built with
# :class:`~double_backward.Cube` should satisfy :math:`u'' = -\pi^2 \sin(\pi t)`. The residual
# needs :math:`d^2u/dt^2` (double backward), and training differentiates the residual loss
# with respect to the parameters (a third backward through ``Cube``).
import math

from double_backward import Cube

t = torch.linspace(0, 1, 9, dtype=torch.float64)
params = [torch.randn(6, dtype=torch.float64) for _ in range(3)]


def residual_loss_gradient(cube):
    a, w, c = (p.clone().requires_grad_() for p in params)
    points = t.clone().requires_grad_()
    u = (cube(points[:, None] * w + c) * a).sum(dim=1)
    (du,) = torch.autograd.grad(u.sum(), points, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), points, create_graph=True)
    loss = (d2u + math.pi**2 * torch.sin(math.pi * points)).pow(2).mean()
    return loss.item(), torch.autograd.grad(loss, (a, w, c))


(loss, ours), (_, native) = (
    residual_loss_gradient(Cube.apply),
    residual_loss_gradient(lambda z: z**3),
)
print(f"residual loss: {loss:.4f}")
for name, mine, theirs in zip("awc", ours, native, strict=True):
    print(f"d loss / d{name} matches x**3: {torch.allclose(mine, theirs)}")

# %%
# Takeaway
# --------
# Each application is ordinary PyTorch code that happens to differentiate a gradient; a custom
# Function in it must support double backward, or the result is an error or, worse, silently
# wrong (:doc:`/auto_examples/when_it_breaks/plot_13_failure_gallery`). Next, how to check yours:
# :doc:`/auto_examples/when_it_breaks/plot_16_check_your_function`.
