r"""
LayerNorm's third derivative, and forward mode
==============================================

The native :func:`torch.nn.functional.layer_norm` saves its statistics from forward, as the
trap of :doc:`/auto_examples/writing/plot_07c_layer_norm_trap` does. Its double backward
formula accounts for them
by hand, so its second derivative by reverse mode is right. This page shows where that stops:
its third derivative, and its second derivative by forward mode.
"""

# %%
# A reference for the third order
# -------------------------------
# The third derivative needs a reference that is right at the third order. LayerNorm composed of
# native elementwise ops and reductions is one: every op in it has derivatives to any order.
# Finite differences (:func:`~torch.autograd.gradgradcheck` of the gradient) decide between the
# versions at the end.
import torch
import torch.nn.functional as F

from double_backward.functions.layer_norm import layer_norm, layer_norm_with_statistics


def composed_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return (
        centred / torch.sqrt((centred**2).mean(-1, keepdim=True) + eps) * weight + bias
    )


def directional_derivatives(f, x, seed=1):
    """f's value, then the gradient of <previous, random direction>, three times."""
    generator = torch.Generator().manual_seed(seed)
    x = x.detach().requires_grad_()
    target = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    value = f(x)
    results = [value]
    scalar = ((value - target) ** 2 * x.sin()).sum()  # grad_out depends on x
    for _ in range(3):
        (derivative,) = torch.autograd.grad(scalar, x, create_graph=True)
        results.append(derivative)
        direction = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        scalar = (derivative * direction).sum()
    return results


# %%
# The native op falls into the trap one order up
# ----------------------------------------------
# The native op's third derivative differentiates its double backward formula with the
# statistics as constants (`pytorch/pytorch#175754
# <https://github.com/pytorch/pytorch/issues/175754>`_; a fix may make it an error instead,
# which the table would show). The two fixed Functions of
# :doc:`/auto_examples/writing/plot_07c_layer_norm_trap`
# agree with the composed LayerNorm at every order. Each cell is the largest difference from
# the composed LayerNorm, in float64.
torch.manual_seed(0)

x_ln = torch.randn(2, 3, 8, dtype=torch.float64)
w_ln, b_ln = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
reference = directional_derivatives(
    lambda t: composed_layer_norm(t, (8,), w_ln, b_ln), x_ln
)
third_order = {}
print(f"torch {torch.__version__}; largest difference from the composed LayerNorm:")
print(f"{'':<24}{'value':>10}{'gradient':>10}{'HVP':>10}{'third':>10}")
for name, norm in (("F.layer_norm", F.layer_norm), ("LayerNorm", layer_norm),
                   ("LayerNormWithStatistics", layer_norm_with_statistics)):
    try:
        got = directional_derivatives(
            lambda t, norm=norm: norm(t, (8,), w_ln, b_ln), x_ln
        )
    except RuntimeError as error:  # a torch that refuses the third order says so
        print(f"{name:<24}RuntimeError: {str(error).splitlines()[0]}")
        continue
    cells = "".join(
        f"{(a - b).abs().max().item():>10.0e}"
        for a, b in zip(got, reference, strict=True)
    )
    print(f"{name:<24}{cells}")
    third_order[name] = (got[3] - reference[3]).abs().max().item()

# %%
# Forward mode has formulas of its own
# ------------------------------------
# ``F.layer_norm``'s second derivative taken with forward mode first is wrong too
# (`pytorch/pytorch#196700 <https://github.com/pytorch/pytorch/issues/196700>`_). Below, the
# Hessian of a loss of it by ``jacfwd`` over ``jacfwd``, against ``jacrev`` over ``jacrev``,
# and the composed LayerNorm's by both. :doc:`/auto_examples/writing/plot_08_higher_orders` says
# where else
# inheritance stops.
from torch.func import jacfwd, jacrev

x_rows = x_ln[0]


def cubed_loss(norm):
    return lambda t: (norm(t, (8,), w_ln, b_ln) ** 3).sum()


for name, norm in (("F.layer_norm", F.layer_norm), ("composed", composed_layer_norm)):
    by_reverse = jacrev(jacrev(cubed_loss(norm)))(x_rows)
    by_forward = jacfwd(jacfwd(cubed_loss(norm)))(x_rows)
    largest = (by_forward - by_reverse).abs().max().item()
    shown = f"{largest:.1e}" if largest > 1e-10 else "below 1e-10"
    print(f"{name:<13} Hessian, jacfwd(jacfwd) against jacrev(jacrev): {shown}")

# %%
# Finite differences decide between them: :func:`~torch.autograd.gradgradcheck` of each gradient.
from torch.autograd import gradgradcheck
from torch.autograd.gradcheck import GradcheckError

weight6 = torch.randn(6, dtype=torch.float64)
x_fd = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
grad_out6 = torch.randn(3, 6, dtype=torch.float64)
for name, norm in (("F.layer_norm", F.layer_norm), ("LayerNorm", layer_norm)):

    def gradient(t, norm=norm):
        return torch.autograd.grad(norm(t, (6,), weight6, None), t, grad_out6,
                                   create_graph=True)[0]

    try:
        print(f"{name:<14} gradgradcheck of the gradient passed: "
              f"{gradgradcheck(gradient, (x_fd,))}")
    except (GradcheckError, RuntimeError) as error:
        first_line = str(error).splitlines()[0].rstrip(",")
        print(f"{name:<14} gradgradcheck of the gradient: {first_line}")

# %%
# The largest differences, drawn
# ------------------------------
# The third-order column of the first table, on a log scale: the native op's third derivative
# is off by many orders of magnitude more than rounding. A difference of exactly zero is drawn
# at 1e-17.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, axes = plt.subplots(figsize=(5, 3), layout="constrained")
axes.bar(list(third_order), [max(d, 1e-17) for d in third_order.values()])
axes.set(yscale="log", ylabel="largest difference",
         title="Third derivative against the composed LayerNorm")
plt.show()

# %%
# Next
# ----
# What these versions cost, in time and in saved bytes:
# :doc:`/auto_examples/writing/plot_07e_softmax_layer_norm_costs`.
# Third and higher orders in general: :doc:`/auto_examples/writing/plot_08_higher_orders`; to check
# your own Function:
# :doc:`/auto_examples/when_it_breaks/plot_16_check_your_function`.
