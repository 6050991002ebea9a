r"""
LayerNorm: the trap of saved statistics
=======================================

LayerNorm's backward needs the row mean and the inverse standard deviation. Fused kernels save
both from forward, and a custom Function that does the same gets a first derivative that is
right and a second derivative that is silently wrong. This page derives LayerNorm's backward,
measures how wrong the trap's Hessian is, shows :func:`double_backward.check` naming the cause,
and fixes it two ways.

It applies the method of :doc:`/auto_examples/writing/plot_07_deriving_double_backward`:
backward is a function
:math:`g(\bar{y}, x)`, and its derivative with respect to :math:`x` needs every tensor in
:math:`g` to depend on :math:`x` in the graph.
"""

# %%
# LayerNorm, worked out
# ---------------------
# LayerNorm normalises over the last dimensions (:math:`N` elements per row) and scales and
# shifts with a weight and a bias broadcast over the rows. With :math:`\mu` the row mean,
# :math:`r = (\sigma^2 + \epsilon)^{-1/2}` and :math:`\hat{x} = (x - \mu)\,r`:
#
# .. math:: y = \hat{x} \odot w + b.
#
# Three inputs, so three gradients. With :math:`\hat{g} = \bar{y} \odot w` and
# :math:`\overline{(\cdot)}` the mean over the row:
#
# .. math::
#
#    \bar{x} = r\,(\hat{g} - \overline{\hat{g}} - \hat{x}\;\overline{\hat{g}\odot\hat{x}}),
#    \qquad \bar{w} = \textstyle\sum_{\text{rows}} \bar{y} \odot \hat{x},
#    \qquad \bar{b} = \textstyle\sum_{\text{rows}} \bar{y}.
#
# The two terms subtracted in :math:`\bar{x}` are the contributions of :math:`\mu` and
# :math:`r`, which depend on :math:`x`:
#
# .. math::
#
#    \frac{\partial \mu}{\partial x_i} = \frac{1}{N},
#    \qquad
#    \frac{\partial r}{\partial x_i} = -\frac{r^3 (x_i - \mu)}{N}.
#
# The broadcasting of :math:`w` and :math:`b` over rows becomes a sum over rows in their
# gradients. The first derivative is right whatever :math:`\mu` and :math:`r` are made of. The
# second derivative differentiates :math:`\bar{x}`, and needs :math:`\mu` and :math:`r` to
# depend on :math:`x` *in the graph*.
#
# .. literalinclude:: /../src/double_backward/functions/layer_norm.py
#    :pyobject: statistics
#
# .. literalinclude:: /../src/double_backward/functions/layer_norm.py
#    :pyobject: layer_norm_backward

# %%
# The trap: saving the statistics, as fused kernels do
# ----------------------------------------------------
# Fused LayerNorm kernels compute :math:`\mu` and :math:`r` in forward and save them for
# backward; apex's ``FusedLayerNormAffineFunction`` saves ``input, weight, bias, mean, invvar``.
# Port such a backward to torch operations on the saved statistics and you get this trap. In a
# custom Function forward is not recorded, so the saved statistics have no history. The input
# is tracked, so nothing errors: the Hessian silently misses every term through
# :math:`\partial\mu/\partial x` and :math:`\partial r/\partial x`.
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: LayerNormSavesStatistics
#
# Its first derivative passes :func:`~torch.autograd.gradcheck`; its second does not:
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.failures import layer_norm_saves_statistics

torch.manual_seed(0)

x_w_b = [
    torch.randn(s, dtype=torch.float64, requires_grad=True) for s in ((3, 6), 6, 6)
]


def trap(x, weight, bias):
    return layer_norm_saves_statistics(x, (6,), weight, bias)


print(f"gradcheck passed: {gradcheck(trap, x_w_b)}")
try:
    gradgradcheck(trap, x_w_b)
except GradcheckError as error:
    print(f"gradgradcheck: GradcheckError: {str(error).splitlines()[0].rstrip(',')}")

# %%
# How wrong: the Hessian against the native op
# --------------------------------------------
# The relative error :math:`\lVert H v - H_{\text{native}} v\rVert / \lVert
# H_{\text{native}} v\rVert` of a Hessian-vector product with respect to :math:`x`, at rows of
# :math:`N` elements, against :func:`torch.nn.functional.layer_norm`, which is independent of
# the code under test. Eight random draws of inputs, :math:`\bar{y}` and :math:`v` per width
# (float64, weight and bias random):


def hvp_error(norm, width, seed, rows=8):
    generator = torch.Generator().manual_seed(seed)
    x, grad_out, v = (torch.randn(rows, width, generator=generator, dtype=torch.float64)
                      for _ in range(3))
    weight, bias = (torch.randn(width, generator=generator, dtype=torch.float64)
                    for _ in range(2))

    def hvp(f):
        xr = x.clone().requires_grad_()
        (grad_x,) = torch.autograd.grad(f(xr, (width,), weight, bias), xr, grad_out,
                                        create_graph=True)
        return torch.autograd.grad(grad_x, xr, v)[0]

    expected = hvp(F.layer_norm)
    return ((hvp(norm) - expected).norm() / expected.norm()).item()


print(f"{'N':>5}  relative error of the trap's Hessian-vector product (8 draws)")
medians = {}
for width in (16, 64, 256, 1024):
    errors = [hvp_error(layer_norm_saves_statistics, width, seed) for seed in range(8)]
    medians[width] = sorted(errors)[4]
    print(f"{width:>5}  min {min(errors):4.0%}  median {sorted(errors)[4]:4.0%}  "
          f"max {max(errors):4.0%}")

# %%
# The same medians, drawn: the trap's error at each row width, the median of the eight draws
# above.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, axes = plt.subplots(figsize=(6, 3), layout="constrained")
axes.plot(list(medians), [100 * m for m in medians.values()], marker="o")
axes.set(xscale="log", xlabel="row width N", ylabel="median relative error (%)",
         title="The trap's Hessian-vector product", ylim=(0, None))
plt.show()

# %%
# In a composed loss: a gradient penalty
# --------------------------------------
# The case readers meet: a critic ``x -> Linear -> LayerNorm -> tanh -> Linear`` with a WGAN-GP
# penalty :math:`(\lVert\nabla_x D\rVert - 1)^2` on its input gradient. Training takes the
# gradient of the penalty with respect to the parameters, a double backward through
# LayerNorm with a :math:`\bar{y}` that depends on the parameters. Relative error of that
# gradient, against the critic built on :func:`~torch.nn.functional.layer_norm`:
from double_backward.functions.layer_norm import layer_norm, layer_norm_with_statistics


def penalty_gradient(norm, seed=0, batch=64, features=16, hidden=32):
    generator = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, hidden, generator=generator, dtype=torch.float64) / 4
    w2 = torch.randn(hidden, 1, generator=generator, dtype=torch.float64) / 4
    gain, shift = (
        torch.ones(hidden, dtype=torch.float64),
        torch.zeros(hidden, dtype=torch.float64),
    )
    params = [t.requires_grad_() for t in (w1, w2, gain, shift)]
    x = torch.randn(batch, features, generator=generator, dtype=torch.float64)
    x.requires_grad_()
    critic = torch.tanh(norm(x @ w1, (hidden,), gain, shift)) @ w2
    (grad_x,) = torch.autograd.grad(critic.sum(), x, create_graph=True)
    penalty = ((grad_x.norm(dim=1) - 1) ** 2).mean()
    grads = torch.autograd.grad(
        penalty, params, allow_unused=True, materialize_grads=True
    )
    return torch.cat([g.flatten() for g in grads])


expected = penalty_gradient(F.layer_norm)
for name, norm in (("the trap", layer_norm_saves_statistics), ("LayerNorm", layer_norm),
                   ("LayerNormWithStatistics", layer_norm_with_statistics)):
    error = (penalty_gradient(norm) - expected).norm() / expected.norm()
    print(f"{name:<24} penalty gradient relative error: {error.item():.1e}")

# %%
# The checker names the cause
# ---------------------------
# :func:`double_backward.check` sees the failing second derivative. Reading the graph, it names
# the statistics saved without history: saved tensors #2 and #3. The weight is saved without
# history too, but it is a constant here, the same tensor whatever the input, so the checker
# does not name it.
import double_backward

weight6 = torch.randn(6, dtype=torch.float64)
print(double_backward.check(lambda t: layer_norm_saves_statistics(t, (6,), weight6),
                            torch.randn(3, 6, dtype=torch.float64)))

# %%
# The fix, two ways
# -----------------
# **Recompute.** Save only the inputs, and compute :math:`\mu` and :math:`r` again in backward
# from the tracked :math:`x`. Under ``create_graph=True`` that recomputation is recorded, so the
# graph knows they depend on :math:`x`. It costs one mean and one variance more per backward,
# and keeps nothing extra.
#
# .. literalinclude:: /../src/double_backward/functions/layer_norm.py
#    :pyobject: LayerNorm

# %%
# **Return them as outputs**, as ``Sinh`` does its exponentials
# (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`). Outputs are tracked: when the
# second backward
# differentiates :math:`\bar{x}` with respect to them, their gradients come back into backward,
# which adds :math:`\bar{\mu}/N - \bar{r}\, r^3 (x - \mu)/N`.
#
# .. literalinclude:: /../src/double_backward/functions/layer_norm.py
#    :pyobject: LayerNormWithStatistics

# %%
# Both, against the same native Hessian-vector products as the trap above:
for name, norm in (("LayerNorm", layer_norm),
                   ("LayerNormWithStatistics", layer_norm_with_statistics)):
    worst = max(
        hvp_error(norm, width, seed) for width in (16, 256) for seed in range(4)
    )
    print(
        f"{name:<24} largest relative error of the Hessian-vector product: {worst:.0e}"
    )


# %%
# Next
# ----
# The native :func:`~torch.nn.functional.layer_norm` saves its statistics too, and gets its
# second derivative right by a formula written by hand. Its third derivative is another
# matter: :doc:`/auto_examples/writing/plot_07d_layer_norm_third_order`.
