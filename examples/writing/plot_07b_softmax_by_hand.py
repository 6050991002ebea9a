r"""
Softmax's double backward, written by hand
==========================================

:doc:`/auto_examples/writing/plot_07_deriving_double_backward` split softmax's double backward
into two parts, the
JVP and the mixed term, and let autograd derive both (version 1). This page writes them by hand,
twice: in a ``SoftmaxBackward`` Function (version 2), and with the forward-mode ``jvp``
reused for the first part (version 3). All three versions are then checked against
:func:`torch.softmax` to the third derivative.
"""

# %%
# Version 2: a hand-written ``SoftmaxBackward``
# ---------------------------------------------
# When backward is one fused kernel (or code autograd cannot see), make it a Function whose
# backward returns both parts by hand, as ``CubeBackward`` does in
# :doc:`/auto_examples/tutorial/plot_04_untracked_backward`. Its backward is torch ops on its saved
# inputs, so third and
# higher orders work too in reverse mode. Each part is computed only for an input that requires
# grad.
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: SoftmaxHandWritten
#
# .. literalinclude:: /../src/double_backward/functions/softmax.py
#    :pyobject: SoftmaxBackward
#
# Now ``grad_x`` is a single ``SoftmaxBackwardBackward`` node keeping ``grad_out`` and ``y``.
# (Colours: :doc:`/auto_examples/tutorial/plot_00_grad_mode_rules`.)
import torch

from double_backward.functions.softmax import softmax, softmax_hand_written
from double_backward.graph import autograd_graph

# sphinx_gallery_thumbnail_number = 1
torch.manual_seed(0)
x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
x_small = torch.randn(4, dtype=torch.float64, requires_grad=True)
(grad_x,) = torch.autograd.grad(
    softmax_hand_written(x_small, 0), x_small, torch.randn(4, dtype=torch.float64),
    create_graph=True,
)
autograd_graph({"grad_x": grad_x}, {"x": x_small},
               title="grad_x of SoftmaxHandWritten: one SoftmaxBackward node")

# %%
# Version 3: the ``jvp`` reused
# -----------------------------
# In the ``setup_context`` style (:doc:`/auto_examples/writing/plot_06_modern_api`) a Function can
# have a ``jvp``
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
# Next
# ----
# Softmax needs only its output, which autograd tracks. LayerNorm needs its statistics too, and
# saving them from forward is a trap that fused kernels fall into:
# :doc:`/auto_examples/writing/plot_07c_layer_norm_trap`.
