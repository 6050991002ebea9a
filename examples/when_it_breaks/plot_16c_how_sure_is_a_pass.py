r"""
How sure is a passing verdict?
==============================

A pass from :func:`double_backward.check` is evidence, not proof: the checker compares the
Hessian-vector product with central differences along a few random directions, and an error
can hide from all of them. This page derives a bound on the chance of that, measures it on a
Function broken by 5%, and shows the kind of error the bound does not cover.
"""

# %%
# The bound
# ---------
# Say the Hessian-vector product :math:`Hu` is wrong by :math:`E u`, with
# :math:`\|E\|_F = \varepsilon \|H\|_F` (a 5% error: :math:`\varepsilon = 0.05`). A random
# direction :math:`u \sim N(0, I)` misses it when the relative error it shows,
# :math:`\|Eu\| / \|Hu\|`, stays below the tolerance :math:`\tau = 10^{-3}` (float64).
# The hardest error to meet is one on a single element: then :math:`\|Eu\| = \|E\|_F |z|`
# for one standard normal :math:`z`, while :math:`\|Hu\|^2` has mean :math:`\|H\|_F^2`.
# Since :math:`P(|z| < c) \le c\sqrt{2/\pi}`, and by Jensen's inequality,
#
# .. math::
#
#    P(\text{miss in one direction}) \le \sqrt{2/\pi}\,\frac{\tau}{\varepsilon}
#    = 0.8 \times \frac{10^{-3}}{0.05} \approx 0.016,
#
# and with :math:`k` independent directions :math:`0.016^k`: :math:`2.5 \times 10^{-4}` for
# the default :math:`k = 2`. The bound assumes the error's direction does not favour those
# where :math:`\|Hu\|` is large; ``directions=`` buys more.

# %%
# The bound, measured
# -------------------
# The Function below is a cube whose double backward adds 5% of :math:`\|H\|_F` to one
# element. It is checked at 1,000 elements, where gradcheck does not run: the directions are
# all the evidence.
import torch

from double_backward import check

torch.manual_seed(0)


class _CubeGradWithError(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, v):
        ctx.save_for_backward(x, v)
        return 3 * x * x * v

    @staticmethod
    def backward(ctx, gg):
        x, v = ctx.saved_tensors
        extra = torch.zeros_like(x)
        extra[0] = 0.05 * (6 * x * v).detach().norm() * gg[0]  # 5% of |H|, on one element
        return 6 * x * v * gg + extra, 3 * x * x * gg


class CubeWithHvpError(torch.autograd.Function):  # BROKEN on purpose, by 5%
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return _CubeGradWithError.apply(x, grad_out)


def misses(fn, size, directions, trials):
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(size, generator=generator) for _ in range(trials)]
    return sum(check(fn, x, directions=directions, seed=i).ok for i, x in enumerate(inputs))


measured = {}
for k, trials in ((1, 1500), (2, 300)):
    p = 0.016**k  # the bound on one check's chance of a miss
    measured[k] = (misses(CubeWithHvpError.apply, 1000, k, trials), trials, trials * p)
    print(f"{k} direction(s): missed {measured[k][0]} of "
          f"{trials} checks (bound: {trials * p:.2g} on average, give or take "
          f"{(trials * p * (1 - p)) ** 0.5:.2g})")

# %%
# Reading the counts
# ------------------
# Each count is a random draw. The bound caps its average, and "give or take" is the spread of
# a count with that average (one standard deviation), so a count within it of the bound agrees
# with it. One direction is tried 1,500 times, so that its expected count (24) is large beside
# that spread; with two directions the bound expects a miss in fewer than one run of 300 in ten.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
figure, panels = plt.subplots(1, len(measured), figsize=(6, 3), layout="constrained")
for axes, (k, (count, trials, bound)) in zip(panels, measured.items(), strict=True):
    spread = (bound * (1 - bound / trials)) ** 0.5
    axes.bar(["measured", "bound"], [count, bound], yerr=[0, spread], capsize=4,
             color=["tab:blue", "tab:gray"])
    axes.set_ylim(bottom=0)
    axes.set(title=f"{k} direction{'s' if k > 1 else ''}, {trials} checks",
             ylabel="checks that missed")
figure.suptitle("A 5% error in the Hessian, at 1,000 elements")
plt.show()

# %%
# What the bound does not cover
# -----------------------------
# The guarantee is about the size of the error *relative to the whole* Hessian-vector
# product, :math:`\varepsilon = \|E\|_F / \|H\|_F`. An error confined to one element is a
# small share of the whole when the inputs are large: here the cube's second derivative is
# wrong by 100% on its first element only, at :math:`10^5` elements, so
# :math:`\varepsilon = |H_{00}| / \|H\|_F`, about :math:`1/\sqrt{n}`, a few thousandths. The
# same bound, :math:`(\sqrt{2/\pi}\,\tau / \varepsilon)^k` at each input's own
# :math:`\varepsilon`, then allows frequent misses, and they happen:


class _CubeGradWrongOnOneElement(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, v):
        ctx.save_for_backward(x, v)
        return 3 * x * x * v

    @staticmethod
    def backward(ctx, gg):
        x, v = ctx.saved_tensors
        extra = torch.zeros_like(x)
        extra[0] = 6 * x[0] * v[0] * gg[0]  # the first element's own entry, doubled
        return 6 * x * v * gg + extra, 3 * x * x * gg


class CubeWrongOnOneElement(torch.autograd.Function):  # BROKEN on purpose, on one element
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return _CubeGradWrongOnOneElement.apply(x, grad_out)


trials, size = 40, 100_000
missed = misses(CubeWrongOnOneElement.apply, size, 2, trials)
print(f"100% wrong on 1 element of {size:,}, default 2 directions: missed {missed} of "
      f"{trials} checks")

# %%
# So read a pass as: no error of 5% of the whole Hessian-vector product or more (missed with a
# chance of at most :math:`2.5 \times 10^{-4}`), not as "every element is right". To find an
# error in a few elements, check at a size where gradcheck's Jacobians are small (up to 100
# elements, every entry is compared), or raise ``directions=``: each direction multiplies
# the chance of a miss by :math:`\sqrt{2/\pi}\,\tau / \varepsilon`.
# %%
# Next
# ----
# A verdict of "could not decide" means nothing was verified at your inputs. Functions whose
# first derivative is not the derivative on purpose need a check of their own:
# :doc:`/auto_examples/when_it_breaks/plot_16d_surrogate_gradients`.
