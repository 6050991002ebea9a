r"""
Deriving double backward for a non-elementwise op
=================================================

Every Function so far was elementwise. The ops people write by hand are not: a softmax, a
normalisation, an attention, a reduction with broadcasting. This page derives double backward
for two of them, softmax and LayerNorm with weight and bias, from one observation: backward is
a function :math:`g(\bar{y}, x)`, linear in the incoming gradient :math:`\bar{y}`, and its own
vector-Jacobian product has two parts, one of which is the forward-mode derivative you may
already have.

You will see softmax written three ways (backward in differentiable ops; a hand-written
``SoftmaxBackward`` Function; a ``jvp`` reused in the double backward), each checked against
:func:`torch.softmax` to the third derivative; the LayerNorm trap that fused kernels fall into,
with its Hessian error measured against the native op; the fix; and what each version costs.
"""

# %%
# Backward is a function of two inputs
# ------------------------------------
# For :math:`y = f(x)` with Jacobian :math:`J(x)`, backward computes
#
# .. math:: \bar{x} = g(\bar{y}, x) = J(x)^\top \bar{y}.
#
# Double backward is the vector-Jacobian product of :math:`g` itself, for a cotangent :math:`v`
# (the gradient arriving at :math:`\bar{x}`). :math:`g` has two inputs, so it has two parts:
#
# .. math::
#
#    \frac{\partial \langle v, g\rangle}{\partial \bar{y}} = J(x)\,v,
#    \qquad
#    \frac{\partial \langle v, g\rangle}{\partial x}
#      = \frac{\partial}{\partial x}\langle \bar{y}, J(x)\,v \rangle
#      = \nabla^2 \langle \bar{y}, f\rangle(x)\; v .
#
# The first is the forward-mode derivative (JVP) of :math:`f` in the direction :math:`v`: no new
# derivation, just the ``jvp`` of the forward. The second, the *mixed term*, is where the work
# is: the Hessian of :math:`\langle\bar{y}, f\rangle` applied to :math:`v`. A Hessian-vector
# product with a fixed :math:`\bar{y}` needs only the mixed term; a composed loss, whose
# :math:`\bar{y}` depends on :math:`x`, needs both. First, the claim, for native ops:
# differentiate their backward with respect to ``grad_out`` and compare with
# :func:`torch.func.jvp` (:math:`Jv`) and with the backward itself (:math:`J^\top v`). Softmax
# has a symmetric Jacobian, where the two coincide; log-softmax and LayerNorm with a weight do
# not.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
v = torch.randn(3, 5, dtype=torch.float64)
weight5 = torch.randn(5, dtype=torch.float64)
ops = {
    "softmax": lambda t: torch.softmax(t, -1),
    "log_softmax": lambda t: torch.log_softmax(t, -1),
    "layer_norm": lambda t: F.layer_norm(t, (5,), weight5),
}
print(f"{'':<12}{'max |part - Jv|':>17}{'max |part - J^T v|':>20}")
for name, op in ops.items():
    grad_out = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(op(x), x, grad_out, create_graph=True)
    (part,) = torch.autograd.grad(grad_x, grad_out, v)
    _, jv = torch.func.jvp(op, (x.detach(),), (v,))
    (jtv,) = torch.autograd.grad(op(x), x, v)
    print(f"{name:<12}{(part - jv).abs().max().item():>17.1e}"
          f"{(part - jtv).abs().max().item():>20.1e}")

# %%
# Softmax, worked out
# -------------------
# Along ``dim``, with :math:`\langle a, b\rangle` the sum over that dimension (one value per
# row, broadcast back), :math:`y = \operatorname{softmax}(x)` has
# :math:`J = \operatorname{diag}(y) - y y^\top`, so
#
# .. math:: \bar{x} = g(\bar{y}, y) = y \odot (\bar{y} - \langle \bar{y}, y\rangle).
#
# It needs only the output :math:`y`, which can be saved: an output is tracked (case 2,
# :doc:`plot_02_saving_outputs`). Writing :math:`g` in terms of :math:`y`, its two parts are
#
# .. math::
#
#    \frac{\partial \langle v, g\rangle}{\partial \bar{y}} = y \odot (v - \langle v, y\rangle),
#    \qquad
#    \frac{\partial \langle v, g\rangle}{\partial y}
#      = v \odot (\bar{y} - \langle \bar{y}, y\rangle) - \langle v, y\rangle\, \bar{y}.
#
# :math:`J` is symmetric, so the first part, the JVP, is the same formula as backward. The
# second reaches :math:`x` through :math:`y`'s own ``grad_fn``: the softmax's backward again.
#
# Version 1: backward in differentiable ops
# -----------------------------------------
# Write :math:`g` with torch ops on saved tensors that autograd tracks, and autograd derives
# both parts, in reverse mode, to the third order checked below and beyond as far as the
# native ops' own formulas go. Nothing else to write:
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: softmax_vjp
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: Softmax
#
# Its ``grad_x`` is a graph of ``mul``, ``sum`` and ``sub`` on the saved ``y``, which leads back
# to ``x`` through ``SoftmaxBackward``. (Colours: :doc:`plot_00_grad_mode_rules`.)
from double_backward.functions.softmax import softmax
from double_backward.graph import autograd_graph

x_small = torch.randn(4, dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(
    softmax(x_small, 0), x_small, torch.randn(4, dtype=torch.float64), create_graph=True
)
autograd_graph({"grad_x": grad_x}, {"x": x_small},
               title="grad_x of Softmax: torch ops on y, which leads back to x")

# %%
# Version 2: a hand-written ``SoftmaxBackward``
# ---------------------------------------------
# When backward is one fused kernel (or code autograd cannot see), make it a Function whose
# backward returns both parts by hand, as ``CubeBackward`` does in
# :doc:`plot_04_untracked_backward`. Its backward is torch ops on its saved inputs, so third and
# higher orders work too in reverse mode (the third is checked below); each part is computed
# only for an input that requires grad.
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: SoftmaxHandWritten
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: SoftmaxBackward
#
# Now ``grad_x`` is a single ``SoftmaxBackwardBackward`` node keeping ``grad_out`` and ``y``.
from double_backward.functions.softmax import softmax_hand_written

(grad_x,) = torch.autograd.grad(
    softmax_hand_written(x_small, 0), x_small, torch.randn(4, dtype=torch.float64),
    create_graph=True,
)
autograd_graph({"grad_x": grad_x}, {"x": x_small},
               title="grad_x of SoftmaxHandWritten: one SoftmaxBackward node")

# %%
# Version 3: the ``jvp`` reused
# -----------------------------
# In the ``setup_context`` style (:doc:`plot_06_modern_api`) a Function can have a ``jvp``
# for forward mode. The part of the double backward with respect to :math:`\bar{y}` *is* that
# JVP, so the backward's backward calls the same
# :func:`~double_backward.functions.softmax.softmax_jvp`, and only the mixed term is new:
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: softmax_jvp
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: SoftmaxWithJvp
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: SoftmaxWithJvpBackward
#
# With a ``jvp`` on both Functions, forward-over-reverse Hessians work as well:
# ``jacfwd(jacrev(f))`` against :func:`torch.func.hessian` of the native op.
from torch.func import hessian, jacfwd, jacrev

from double_backward.functions.softmax import softmax_with_jvp

weights = torch.randn(3, 5, dtype=torch.float64)
ours = jacfwd(jacrev(lambda t: (softmax_with_jvp(t, -1) * weights).sum()))(x.detach())
native = hessian(lambda t: (torch.softmax(t, -1) * weights).sum())(x.detach())
print(f"forward-over-reverse Hessian vs native: max difference "
      f"{(ours - native).abs().max().item():.1e}")

# %%
# All three against ``torch.softmax``, to the third derivative
# ------------------------------------------------------------
# In float64, over the middle dimension of a ``(2, 3, 4)`` input, with a composed loss whose
# gradient arriving at softmax depends on :math:`x`: the value, the gradient, a Hessian-vector
# product and a third directional derivative, each as the largest difference from the native op.


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


x3 = torch.randn(2, 3, 4, dtype=torch.float64)
expected = directional_derivatives(lambda t: torch.softmax(t, 1), x3)
versions = {"Softmax": softmax, "SoftmaxHandWritten": softmax_hand_written,
            "SoftmaxWithJvp": softmax_with_jvp}
print(f"{'':<20}{'value':>10}{'gradient':>10}{'HVP':>10}{'third':>10}")
for name, fn in versions.items():
    got = directional_derivatives(lambda t, fn=fn: fn(t, 1), x3)
    cells = "".join(
        f"{(a - b).abs().max().item():>10.0e}"
        for a, b in zip(got, expected, strict=True)
    )
    print(f"{name:<20}{cells}")

# %%
# And :func:`~torch.autograd.gradcheck` and :func:`~torch.autograd.gradgradcheck` against
# finite differences, independent of any reference op:
from torch.autograd import gradcheck, gradgradcheck

x_check = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
for name, fn in versions.items():
    first = gradcheck(lambda t, fn=fn: fn(t, -1), (x_check,))
    second = gradgradcheck(lambda t, fn=fn: fn(t, -1), (x_check,))
    print(f"{name:<20} gradcheck passed: {first}   gradgradcheck passed: {second}")

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
#
# The trap: saving the statistics, as fused kernels do
# ----------------------------------------------------
# Fused LayerNorm kernels compute :math:`\mu` and :math:`r` in forward and save them for
# backward (apex's ``FusedLayerNormAffineFunction`` saves ``input, weight, bias, mean,
# invvar``). Apex's backward is itself one unrecorded CUDA kernel (``backward_affine``), so it
# has no double backward at all; port such a backward to torch operations on the saved
# statistics and you get this trap. In a custom Function, forward is not recorded: the saved
# statistics have no history. The input is saved too and is tracked, so nothing errors: the
# Hessian is silently missing every term through :math:`\partial\mu/\partial x` and
# :math:`\partial r/\partial x`.
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: LayerNormSavesStatistics
#
# Its first derivative passes :func:`~torch.autograd.gradcheck`; its second does not:
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.failures import layer_norm_saves_statistics

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
for width in (16, 64, 256, 1024):
    errors = [hvp_error(layer_norm_saves_statistics, width, seed) for seed in range(8)]
    print(f"{width:>5}  min {min(errors):4.0%}  median {sorted(errors)[4]:4.0%}  "
          f"max {max(errors):4.0%}")

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
# :func:`double_backward.check` sees the failing second derivative and, reading the graph,
# names the statistics saved without history, saved tensors #2 and #3. The weight is saved
# without history too (a constant here, closed over by the lambda), but it is the same
# tensor whatever the input, so its derivative is zero and returning it as an output would
# change nothing: the checker does not name it.
import double_backward

weight6 = torch.randn(6, dtype=torch.float64)
print(double_backward.check(lambda t: layer_norm_saves_statistics(t, (6,), weight6),
                            torch.randn(3, 6, dtype=torch.float64)))

# %%
# The fix, two ways
# -----------------
# **Recompute.** Save only the inputs, and compute :math:`\mu` and :math:`r` again in backward
# from the tracked :math:`x`: under ``create_graph=True`` that recomputation is recorded, so the
# graph knows they depend on :math:`x`. One mean and one variance more per backward, nothing
# extra kept.
#
# .. literalinclude:: /../src/double_backward/functions/layer_norm.py
#    :pyobject: LayerNorm
#
# **Return them as outputs.** As ``Sinh`` does its exponentials
# (:doc:`plot_03_saving_intermediates`): outputs are tracked, and when the second backward
# differentiates :math:`\bar{x}` with respect to them, their gradients come back into backward,
# which adds
# :math:`\bar{\mu}/N - \bar{r}\, r^3 (x - \mu)/N`.
#
# .. literalinclude:: /../src/double_backward/functions/layer_norm.py
#    :pyobject: LayerNormWithStatistics
#
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
# The native op falls into the trap one order up
# ----------------------------------------------
# :func:`torch.nn.functional.layer_norm` saves its mean and :math:`r` from the forward kernel
# too. Its double backward formula accounts for their dependence on :math:`x` by hand, so its
# second derivative by reverse mode is right (by forward mode it is not, as the end of this
# section runs); its third derivative differentiates that formula with the
# statistics as constants (`pytorch/pytorch#175754
# <https://github.com/pytorch/pytorch/issues/175754>`_; a fix may make it an error instead,
# which the table would show). So for the third order the reference is
# LayerNorm composed of native elementwise ops and reductions (at the third order the two
# fixed Functions agree with it, and finite differences pass the first of them), and
# finite differences: :func:`~torch.autograd.gradgradcheck` of the gradient.


def composed_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return (
        centred / torch.sqrt((centred**2).mean(-1, keepdim=True) + eps) * weight + bias
    )


x_ln = torch.randn(2, 3, 8, dtype=torch.float64)
w_ln, b_ln = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
reference = directional_derivatives(
    lambda t: composed_layer_norm(t, (8,), w_ln, b_ln), x_ln
)
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

# %%
# Forward mode has formulas of its own, and ``F.layer_norm``'s second derivative taken with
# forward mode first is wrong too (`pytorch/pytorch#196700
# <https://github.com/pytorch/pytorch/issues/196700>`_): the Hessian of a loss of it by
# ``jacfwd`` over ``jacfwd``, against ``jacrev`` over ``jacrev``, and the composed LayerNorm's
# by both. :doc:`plot_08_higher_orders` says where else inheritance stops.
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
# What it costs
# -------------
# As on :doc:`plot_20_costs`: the times come from a committed benchmark run
# (``benchmarks/softmax_layer_norm.py``, run by ``nox -s bench_functions``), not from this
# build. Rows of 256 float32 elements, one thread, each Function and its native op back to back
# in every round; the figure is the median of the per-round ratios custom / native.
# *Double backward* is forward, a ``create_graph=True`` backward and a Hessian-vector product
# with respect to every input.
from double_backward.costs import load_measurements

measured = load_measurements("softmax_layer_norm")
machine, settings = measured["machine"], measured["settings"]
print(f"measured {measured['date']} on {machine['cpu']}, {machine['cores']} cores (shared), "
      f"torch {machine['torch']}, {settings['dtype']}, {settings['threads']} thread, "
      f"median of {settings['rounds']} paired rounds")
sizes = settings["sizes"]
ratios = {(r["case"], r["size"], r["kind"]): r["ratio"] for r in measured["times"]}
for kind in ("double_backward", "forward_backward"):
    print(f"\n{kind.replace('_', ' ')}, custom / native    "
          + "".join(f"{size:>8.0e}" for size in sizes))
    for case in measured["cases"]:
        cells = "".join(f"{ratios[(case['case'], size, kind)]:>8.2f}" for size in sizes)
        print(f"{case['case']:<36}{cells}")

# %%
# What each keeps for backward
# ----------------------------
# Counted now, exactly, with :func:`~double_backward.costs.saved_tensors`: the bytes saved by
# forward beyond the input and the output (here the weight and bias count too, being fixed
# tensors rather than the function's input), and those the ``create_graph=True`` backward saves
# anew for the second backward, per element of a float32 input of 64 rows of 256.
from double_backward.costs import saved_tensors

x_rows = torch.randn(64, 256)
w_rows, b_rows = torch.randn(256), torch.randn(256)
savers = {
    "torch.softmax": lambda t: torch.softmax(t, -1),
    "Softmax": lambda t: softmax(t, -1),
    "SoftmaxHandWritten": lambda t: softmax_hand_written(t, -1),
    "SoftmaxWithJvp": lambda t: softmax_with_jvp(t, -1),
    "F.layer_norm": lambda t: F.layer_norm(t, (256,), w_rows, b_rows),
    "LayerNorm": lambda t: layer_norm(t, (256,), w_rows, b_rows),
    "LayerNormWithStatistics": lambda t: layer_norm_with_statistics(
        t, (256,), w_rows, b_rows
    ),
    "the trap": lambda t: layer_norm_saves_statistics(t, (256,), w_rows, b_rows),
}
print(f"{'':<24}{'extra B/elt':>12}{'new in backward B/elt':>24}")
for name, fn in savers.items():
    report = saved_tensors(fn, x_rows)
    print(f"{name:<24}{report.extra_bytes / x_rows.numel():>12.2f}"
          f"{report.new_in_backward_bytes / x_rows.numel():>24.1f}")

# %%
# Reading the costs
# -----------------
# At first order a custom Function pays for not being fused: :func:`torch.softmax` and
# :func:`~torch.nn.functional.layer_norm` each run one kernel per pass, where these backward
# formulas run one torch op per term (LayerNorm's has many). In a double backward the native
# ops run their derivative formulas op by op too, and the ratios come closer to 1. Among the
# softmax versions, the two Functions that write the double backward by hand save nothing new
# in their first backward (``SoftmaxBackward`` keeps ``grad_out`` and ``y``, which exist anyway),
# at the price of one more Function call. The trap is the cheapest LayerNorm: it skips exactly
# the terms it gets wrong. Of the fixes, recomputing keeps nothing extra between forward and
# backward, and pays with a mean and a variance per backward; returning the statistics keeps
# two numbers per row. All three LayerNorm versions keep, for a second backward, tensors the
# size of the input (the ``new in backward`` column); the native op's first backward keeps
# only tensors that exist anyway (``grad_out``, the input, its statistics), for a double
# backward written by hand as one formula.
#
# Conclusion
# ----------
# To derive double backward for any op, write backward as :math:`g(\bar{y}, x)`. Its derivative
# with respect to :math:`\bar{y}` is the op's JVP; its derivative with respect to :math:`x` is
# the mixed term. Build :math:`g` from tensors autograd tracks (inputs, outputs, or
# intermediates returned as outputs), or write both parts in a Function of its own. A statistic
# saved from forward is an intermediate, even when the first derivative accounts for it: the
# fused-kernel LayerNorm gets its Hessian wrong, and the native op its third derivative. Next,
# third and higher orders: :doc:`plot_08_higher_orders`; to check your own Function:
# :doc:`plot_16_check_your_function`.
