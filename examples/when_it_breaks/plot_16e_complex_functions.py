r"""
Checking a Function of complex inputs
=====================================

PyTorch differentiates a real loss of complex inputs by a convention of its own, and a
backward written without it is wrong in a way that real inputs never show. This page states
the convention, checks a complex Function that follows it with :func:`double_backward.check`,
and one that forgets it.
"""

# %%
# The convention
# --------------
# For a real loss :math:`L` of a complex :math:`z`, PyTorch's gradient is
# :math:`\partial L/\partial \operatorname{Re} z + i\,\partial L/\partial
# \operatorname{Im} z` (twice the conjugate Wirtinger derivative, gradcheck's convention).
# For a holomorphic :math:`f`, backward therefore returns ``grad_out * conj(f'(z))``.
#
# How the checker handles it
# --------------------------
# The checker treats each complex number as a pair of reals: directions are complex, and
# derivatives are compared through :math:`\operatorname{Re} \sum \bar a\, b`. Forgetting the
# conjugate is the classic mistake (low precision has its own:
# :doc:`/auto_examples/writing/plot_11_dtypes`).
import torch

from double_backward import check


class ComplexSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx, grad_out):
        (z,) = ctx.saved_tensors
        return grad_out * (2 * z).conj()


class ComplexSquareNoConj(ComplexSquare):  # BROKEN on purpose
    @staticmethod
    def backward(ctx, grad_out):
        (z,) = ctx.saved_tensors
        return grad_out * 2 * z  # missing .conj()


torch.manual_seed(0)
z = torch.randn(4, 3, dtype=torch.complex128)
print(check(ComplexSquare.apply, z))
print(check(ComplexSquareNoConj.apply, z).verdict)


# %%
# The conjugate, drawn
# --------------------
# The gradient of :math:`L = \operatorname{Re} z^2` at a few points, as arrows in the complex
# plane: the right backward's (:math:`2\bar{z}`) and the broken one's (:math:`2z`). They agree
# on the real axis and point apart everywhere else.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
points = torch.tensor([1 + 0.5j, -0.5 + 1j, 0.8 - 0.8j, 1.2 + 0j], dtype=torch.complex128)
figure, axes = plt.subplots(figsize=(4.5, 4), layout="constrained")
for fn, colour, label in ((ComplexSquare, "tab:blue", "ComplexSquare"),
                          (ComplexSquareNoConj, "tab:red", "no .conj()")):
    leaf = points.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(fn.apply(leaf).real.sum(), leaf)
    axes.quiver(points.real, points.imag, gradient.real, gradient.imag, color=colour,
                angles="xy", scale_units="xy", scale=4, label=label)
axes.scatter(points.real, points.imag, color="black", zorder=3)
axes.set(xlim=(-1.5, 2), ylim=(-1.5, 1.8), xlabel="Re z", ylabel="Im z", aspect="equal")
axes.legend(loc="lower left")
plt.show()

# %%
# Conclusion
# ----------
# A passing verdict at default settings misses an error of 5% of the whole Hessian-vector
# product with a chance of at most about 1 in 4,000
# (:doc:`/auto_examples/when_it_breaks/plot_16c_how_sure_is_a_pass`). A
# problem it reports is certain, and its diagnosis names the fix
# (:doc:`/auto_examples/when_it_breaks/plot_16b_reading_a_failure`).
# Next: the :doc:`failure gallery </auto_examples/when_it_breaks/plot_13_failure_gallery>` shows
# each broken pattern's
# symptom, and :doc:`/auto_examples/writing/plot_06_modern_api` what :mod:`torch.func` needs. Saved
# tensors edited in
# place: :doc:`/auto_examples/writing/plot_10_inplace_and_views`; graphs freed between two
# backwards:
# :doc:`/auto_examples/writing/plot_09_graph_lifetime`.
