r"""
Reading a failing report
========================

:func:`double_backward.check` reports a problem only when a check was seen to fail, and then
reads the autograd graph to name the likely cause. This page runs it on five broken Functions:
an intermediate kept on ``ctx``, a first-order-only backward behind a lambda, a call that
raises, a backward that detaches its incoming gradient, and a normalisation that saves a
statistic from forward. The last one also shows why
gradgradcheck alone misses such a bug on large inputs.
"""

# %%
# BROKEN: an intermediate kept on ``ctx``
# ---------------------------------------
# This Swish keeps ``sigmoid(x)`` as a ``ctx`` attribute. Forward runs in no-grad mode, so the
# attribute has no history, and gradgradcheck fails. The diagnosis names the tensor, where it
# was kept, its dtype and shape. (Why an intermediate breaks the second derivative, and how
# to derive one that does not: :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`,
# :doc:`/auto_examples/writing/plot_07_deriving_double_backward`.)
import torch

from double_backward import check

torch.manual_seed(0)


class SwishStashed(torch.autograd.Function):  # BROKEN on purpose
    @staticmethod
    def forward(ctx, x):
        ctx.sig = torch.sigmoid(x)  # the mistake
        ctx.save_for_backward(x)
        return x * ctx.sig

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * ctx.sig * (1 + x * (1 - ctx.sig))


print(check(SwishStashed.apply, torch.randn(4, 3)))

# %%
# BROKEN: ``@once_differentiable`` behind a lambda
# ------------------------------------------------
# Detection libraries mark a kernel's backward ``@once_differentiable``, then wrap the call.
# The checker finds the decorator on the graph's node, so the wrapper does not hide it.
from torch.autograd.function import once_differentiable


class SquareKernel(torch.autograd.Function):  # first-order only, on purpose
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return scale * x**2

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * 2 * ctx.scale * x, None


print(check(lambda x: SquareKernel.apply(x, 0.5), torch.randn(4)))

# %%
# BROKEN: the Function itself raises
# ----------------------------------
# An error raised by the Function is reported as that, with its message, not as a wrong
# derivative. Here the call forgets the ``scale`` argument.
print(check(SquareKernel.apply, torch.randn(4)))

# %%
# BROKEN: a lost mixed term, at 10,000 elements
# ----------------------------------------------
# A backward that detaches its incoming gradient still computes the right first derivative
# and the right Hessian-vector product; only the mixed term, the derivative in the incoming
# gradient (what a gradient penalty differentiates), is lost. Above gradgradcheck's size the
# check projects it on a random signed :math:`w` and compares
# :math:`w^\top(\partial_v\, u^\top g)` from double backward with :math:`u^\top g(x, w)`
# from backward, equal for any backward linear in its incoming gradient. Autograd's own
# mixed terms, printed first, show which is right.


class SquareDetachesIncoming(torch.autograd.Function):  # BROKEN on purpose
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_out.detach()  # the mistake: no graph to grad_out


x, v, u = torch.randn(10_000, dtype=torch.float64), torch.randn(10_000), torch.randn(10_000)
for name, fn in (("SquareDetachesIncoming", SquareDetachesIncoming.apply),
                 ("torch.square", torch.square)):  # fmt: skip
    leaf, incoming = x.clone().requires_grad_(), v.double().requires_grad_()
    (grad,) = torch.autograd.grad(fn(leaf), leaf, incoming, create_graph=True)
    _, mixed = torch.autograd.grad(grad, (leaf, incoming), u.double(), allow_unused=True,
                                   materialize_grads=True)  # fmt: skip
    print(f"{name}: |mixed term| = {float(mixed.norm()):.3g}")
print(check(SquareDetachesIncoming.apply, x))

# %%
# A normalisation over wide rows, at 3,000 elements
# -------------------------------------------------
# Fused RMSNorm kernels save ``rstd = 1/sqrt(mean(x²) + eps)`` to skip a reduction in
# backward. Saved from forward, it has no history, so the part of the second derivative that
# flows through it is lost. Along the check's random directions the Hessian-vector product is
# about 6% off, and the report says so. The same trap in LayerNorm, derived and fixed:
# :doc:`/auto_examples/writing/plot_07c_layer_norm_trap`.


class RMSNormSavesRstd(torch.autograd.Function):  # BROKEN on purpose
    @staticmethod
    def forward(ctx, x, weight):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, weight, rstd)  # rstd: an intermediate, the mistake
        return x * rstd * weight

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        x_hat, grad_w = x * rstd, grad_out * weight
        grad_x = rstd * (grad_w - x_hat * (grad_w * x_hat).mean(-1, keepdim=True))
        return grad_x, (grad_out * x_hat).sum(0)


print(check(RMSNormSavesRstd.apply, torch.randn(10, 300), torch.rand(300) + 0.5))

# %%
# gradgradcheck on the same Function
# ----------------------------------
# gradgradcheck's fast mode projects the whole second derivative onto one random pair of
# directions. Over 40 seeded draws of the inputs and of those directions, every one passes at
# 10 x 300. Its full mode catches the error, but only on inputs small enough for a full
# Jacobian (4 x 5 here).
from torch.autograd import gradgradcheck

passed = 0
for seed in range(40):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(10, 300, dtype=torch.float64, generator=generator).requires_grad_()
    weight = (torch.rand(300, dtype=torch.float64, generator=generator) + 0.5).requires_grad_()
    torch.manual_seed(1000 + seed)  # gradgradcheck's fast mode draws its directions here
    passed += gradgradcheck(RMSNormSavesRstd.apply, (x, weight), fast_mode=True,
                            raise_exception=False)
print(f"gradgradcheck, fast mode, 10 x 300: passed {passed} of 40 draws")
small = (x[:4, :5].detach().requires_grad_(), weight[:5].detach().requires_grad_())
full = gradgradcheck(RMSNormSavesRstd.apply, small, raise_exception=False)
print(f"gradgradcheck, full mode, 4 x 5: {'passed' if full else 'FAILED'}")

# %%
# The two modes, drawn
# --------------------
# Fast mode checks the second derivative along one random pair of directions, so an error that
# is small along most pairs passes it. The bars are the counts above, as the share of draws
# that passed.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, axes = plt.subplots(figsize=(4.5, 3), layout="constrained")
bars = axes.bar(["fast mode, 10 x 300\n(40 draws)", "full mode, 4 x 5"],
                [passed / 40, float(full)], color=["tab:orange", "tab:blue"])
axes.bar_label(bars, fmt="%.2f")
axes.set(ylabel="share of draws passed", ylim=(0, 1),
         title="gradgradcheck on the broken RMSNorm")
plt.show()

# %%
# Next
# ----
# A failing verdict is certain: a check failed. How sure a *passing* verdict is, and what it
# does not cover: :doc:`/auto_examples/when_it_breaks/plot_16c_how_sure_is_a_pass`. Each broken
# pattern's symptom, without the
# checker: the :doc:`failure gallery </auto_examples/when_it_breaks/plot_13_failure_gallery>`.
