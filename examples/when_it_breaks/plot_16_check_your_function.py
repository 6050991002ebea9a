r"""
Check your own Function
=======================

:func:`double_backward.check` tells whether a custom Function supports double backward, and
when it does not, why. This page runs it on Functions like the ones real projects write: a
ReLU, a bilinear matmul, a loss with an integer target, a view, a normalisation over wide
rows, a straight-through estimator, a complex Function, and broken ones. Each report opens
with its verdict in one line, then one line per check.

The verdict comes from evidence: a problem is reported only when a check was seen to fail.
While the Jacobians are small, :func:`~torch.autograd.gradcheck` and
:func:`~torch.autograd.gradgradcheck` run (the latter with an incoming gradient that requires
grad). At every size, random *signed* directions are checked: the vector-Jacobian product
against central differences, backward's linearity in its incoming gradient, the
Hessian-vector product against central differences of the gradient, each
with a step chosen for its direction (the largest at which the differences at :math:`h` and
:math:`h/2` agree and no kink is crossed). Each costs a few calls of your Function, so the
cost grows linearly with the inputs. At your inputs, backward and the backward of backward are
also fed the incoming gradients real use feeds: transposed and expanded ones (a transpose or a
``sum`` downstream, where ``grad.view(-1)`` raises: use ``reshape`` or ``.contiguous()``),
missing ones (a loss that uses one output of several, with ``ctx.set_materialize_grads(False)``:
gradcheck's ``check_undefined_grad``) and batched ones (``is_grads_batched=True``, gradcheck's
``check_batched_grad``: ``.item()`` or a branch on a value cannot run there; a note, a problem
with ``require_batched_grad=True``). What a pass guarantees is stated exactly below: an
error of at least 5% of the *whole* Hessian-vector product is missed with a chance of at
most :math:`2.5 \times 10^{-4}`; an error confined to a few elements is a smaller share of
the whole, and the larger the inputs, the more likely it is missed. When no direction can be
decided (every one crosses a kink), the verdict says "could not decide", never a pass. The
mixed term (the derivative in the incoming gradient) is projected on a random signed vector
:math:`w` and compared with backward's own product with :math:`w`: exact, since backward is
linear in its incoming gradient, and missed with the same chance as the Hessian-vector
product's error. The graph is read only to name the cause of a failure.
"""

# %%
# A ReLU: a zero second derivative is an answer
# ---------------------------------------------
# A ReLU whose backward multiplies by the mask ``x > 0`` is among the first custom Functions
# people write. Its gradient has no graph back to ``x``: that is right, since the second
# derivative of a piecewise-linear function is zero. The report says so in a note.
import torch

from double_backward import check


class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * (x > 0)


torch.manual_seed(0)
print(check(MyReLU.apply, torch.randn(4, 3)))

# %%
# At inputs exactly on its kink (half of them 0, as after another ReLU), a ReLU has no
# derivative along any direction that moves them. Above gradcheck's size the central
# differences are all the evidence, and none can decide: the verdict says so, with why and
# what to try. It is never a pass.
print(check(MyReLU.apply, torch.randn(2000).clamp(min=0)))

# %%
# A bilinear Function with two inputs of different shapes
# -------------------------------------------------------
# A matmul saves both operands. Its second derivative is *mixed* only
# (:math:`\partial^2 (AB) / \partial A\,\partial B \neq 0`): gradgradcheck differentiates
# through the incoming gradient too, so the mixed terms are checked.


class MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved_tensors
        return grad_out @ b.T, a.T @ grad_out


print(check(MatMul.apply, torch.randn(4, 3), torch.randn(3, 2)))

# %%
# A loss with an integer target and class weights
# -----------------------------------------------
# Pass the arguments as the Function takes them. Integer tensors (the target) are never
# differentiated; ``wrt=(0,)`` says that only the logits are, so the float class weights are
# passed as constants.


class WeightedBCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, weight):
        ctx.save_for_backward(logits, target, weight)
        return weight * (torch.nn.functional.softplus(logits) - logits * target)

    @staticmethod
    def backward(ctx, grad_out):
        logits, target, weight = ctx.saved_tensors
        return grad_out * weight * (torch.sigmoid(logits) - target), None, None


logits, target, weight = torch.randn(4, 3), torch.randint(0, 2, (4, 3)), torch.rand(3)
print(check(WeightedBCE.apply, logits, target, weight, wrt=(0,)))

# %%
# A view, and an output that is not a tensor to differentiate
# -----------------------------------------------------------
# Forward may return a view of its input, and extra outputs such as integer indices; those
# are left out of the checks, with a note.


class FlattenAndArgmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        indices = x.argmax(-1)
        ctx.mark_non_differentiable(indices)
        return x.view(-1), indices

    @staticmethod
    def backward(ctx, grad_out, _grad_indices):
        return grad_out.view(ctx.shape)


print(check(FlattenAndArgmax.apply, torch.randn(2, 3)))

# %%
# BROKEN: an intermediate kept on ``ctx``
# ---------------------------------------
# This Swish keeps ``sigmoid(x)`` as a ``ctx`` attribute. Forward runs in no-grad mode, so the
# attribute has no history, and gradgradcheck fails. The diagnosis names the tensor, where it
# was kept, its dtype and shape. (Why an intermediate breaks the second derivative, and how
# to derive one that does not: :doc:`plot_03_saving_intermediates`,
# :doc:`plot_07_deriving_double_backward`.)


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
# A normalisation over wide rows, at 10,000 elements
# --------------------------------------------------
# Fused RMSNorm kernels save ``rstd = 1/sqrt(mean(x²) + eps)`` to skip a reduction in
# backward. Saved from forward, it has no history, so the part of the second derivative that
# flows through it is lost. Over a row of 100 values that part is small per element, yet the
# Hessian-vector product along the check's random directions (which move ``x`` and the exact
# weight together) is about 10% off, as printed below. gradgradcheck's fast mode passes it in
# most random draws at this size (counted after the check), and its full mode would build a
# 10,000 x 20,000 Jacobian; the random signed directions catch it for a few calls of the
# Function. The same trap in LayerNorm, derived and fixed:
# :doc:`plot_07_deriving_double_backward`.


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


print(check(RMSNormSavesRstd.apply, torch.randn(100, 100), torch.rand(100) + 0.5))

# %%
# gradgradcheck on the same Function: its fast mode projects the whole second derivative
# onto one random pair of directions, and at 100 x 100 most draws pass it (counted over 40
# seeded draws of the inputs and of gradgradcheck's directions); its full mode catches the
# error, but only on inputs small enough for a full Jacobian (4 x 5 here).
from torch.autograd import gradgradcheck

passed = 0
for seed in range(40):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(100, 100, dtype=torch.float64, generator=generator).requires_grad_()
    weight = (torch.rand(100, dtype=torch.float64, generator=generator) + 0.5).requires_grad_()
    torch.manual_seed(1000 + seed)  # gradgradcheck's fast mode draws its directions here
    passed += gradgradcheck(RMSNormSavesRstd.apply, (x, weight), fast_mode=True,
                            raise_exception=False)
print(f"gradgradcheck, fast mode, 100 x 100: passed {passed} of 40 draws")
small = (x[:4, :5].detach().requires_grad_(), weight[:5].detach().requires_grad_())
full = gradgradcheck(RMSNormSavesRstd.apply, small, raise_exception=False)
print(f"gradgradcheck, full mode, 4 x 5: {'passed' if full else 'FAILED'}")

# %%
# How sure is a passing verdict?
# ------------------------------
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
# the default :math:`k = 2`. (The bound assumes the error's direction does not favour those
# where :math:`\|Hu\|` is large; ``directions=`` buys more.) Measured on a cube whose
# double backward adds 5% of :math:`\|H\|_F` to one element, at 1,000 elements (no
# gradcheck there: the directions alone):


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


for k, trials in ((1, 1500), (2, 300)):
    p = 0.016**k  # the bound on one check's chance of a miss
    print(f"{k} direction(s): missed {misses(CubeWithHvpError.apply, 1000, k, trials)} of "
          f"{trials} checks (bound: {trials * p:.2g} on average, give or take "
          f"{(trials * p * (1 - p)) ** 0.5:.2g})")

# %%
# Each count is a random draw: the bound caps its average, and "give or take" is the spread
# of a count with that average (one standard deviation), so a count within it of the bound
# agrees with it. One direction is tried 1,500 times, so that its expected count (24) is large
# beside that spread; two directions, 300 times, where the bound expects a miss in fewer than
# one run of 300 in ten.
#
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
# Surrogate gradients: a backward that is not the derivative on purpose
# ---------------------------------------------------------------------
# A straight-through estimator rounds in forward and passes ``grad_out`` through in
# backward; gradient reversal (domain-adversarial training) returns ``-grad_out``; a VQ-VAE
# codebook does both. Their first derivative is wrong by design, so a plain check reports
# ``first-order``. With ``surrogate_gradient=True`` (``--surrogate-gradient``) the first
# derivative is taken as given, and the checker tests what double backward must still get
# right: backward is linear in ``grad_out``, and differentiating backward agrees with
# central differences of *your* backward. What that second derivative means, for each of
# these: :doc:`plot_12_surrogate_gradients`.


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out


x = torch.randn(4, 3) * 3
print(check(StraightThroughRound.apply, x).verdict)
print(check(StraightThroughRound.apply, x, surrogate_gradient=True))

# %%
# A spiking neuron's surrogate, broken
# ------------------------------------
# Spiking networks fire a step in forward and use the derivative of a sigmoid in backward.
# Saving that sigmoid from forward loses its own derivative: the surrogate mode finds it,
# since double backward no longer matches central differences of the backward.


class SpikeSavesSigmoid(torch.autograd.Function):  # BROKEN on purpose
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(torch.sigmoid(4 * x))  # an intermediate, the mistake
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (s,) = ctx.saved_tensors
        return grad_out * 4 * s * (1 - s)


print(check(SpikeSavesSigmoid.apply, torch.randn(4, 3), surrogate_gradient=True))

# %%
# Complex inputs
# --------------
# For a real loss :math:`L` of a complex :math:`z`, PyTorch's gradient is
# :math:`\partial L/\partial \operatorname{Re} z + i\,\partial L/\partial
# \operatorname{Im} z` (twice the conjugate Wirtinger derivative, gradcheck's convention).
# For a holomorphic :math:`f`, backward therefore returns ``grad_out * conj(f'(z))``. The
# checker treats each complex number as a pair of reals: directions are complex, and
# derivatives are compared through :math:`\operatorname{Re} \sum \bar a\, b`. Forgetting
# the conjugate is the classic mistake (and low precision has its own,
# :doc:`plot_11_dtypes`):


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


z = torch.randn(4, 3, dtype=torch.complex128)
print(check(ComplexSquare.apply, z))
print(check(ComplexSquareNoConj.apply, z).verdict)

# %%
# Your Function's keywords
# ------------------------
# The Function's own keyword arguments go in ``kwargs={...}``, so none can collide with an
# option of the checker: a dropout taking ``seed=`` gets its seed, while the checker's
# ``seed=`` seeds its own directions.


class Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, seed):
        generator = torch.Generator().manual_seed(seed)
        mask = (torch.rand(x.shape, generator=generator) > p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad_out):
        (mask,) = ctx.saved_tensors
        return grad_out * mask, None, None


def dropout(x, *, p=0.5, seed):
    return Dropout.apply(x, p, seed)


print(check(dropout, torch.randn(4, 3), kwargs={"seed": 3, "p": 0.25}, seed=0).verdict)

# %%
# In your test suite
# ------------------
# :func:`double_backward.testing.assert_supports_double_backward` raises ``AssertionError``
# carrying the report, so a pytest test is one line. Here the broken Swish fails it:
from double_backward.testing import assert_supports_double_backward


def test_swish_supports_double_backward():
    assert_supports_double_backward(SwishStashed.apply, torch.randn(4, 3))


try:
    test_swish_supports_double_backward()
except AssertionError as error:
    print(f"AssertionError: {error}")

# %%
# The incoming gradients a model feeds
# -------------------------------------
# The checks above feed backward contiguous incoming gradients, one at a time. A model feeds
# others: a transpose downstream hands backward a transposed one, a sum over a dimension an
# expanded one (stride 0), a loss that uses one output of several none for the others, and
# ``torch.autograd.grad(..., is_grads_batched=True)`` a batch. So check feeds those too, to
# backward and to the backward of backward. A backward that flattens its incoming gradient
# with ``.view(-1)`` computes the right values and raises in the first model that transposes
# its output; ``.reshape(-1)`` is its fix:


class SquareFlatView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.view(-1) * 2 * x.view(-1)).view(x.shape)


class SquareFlatReshape(SquareFlatView):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.reshape(-1) * 2 * x.reshape(-1)).reshape(x.shape)


x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
weight = torch.randn(3, 4, dtype=torch.float64)
try:  # plain torch, as a model calls it: a transpose, then a weight
    torch.autograd.grad((SquareFlatView.apply(x).t() * weight).sum(), x)
except RuntimeError as error:
    print(f"RuntimeError: {str(error)[:60]}...")
print(check(SquareFlatView.apply, torch.randn(4, 3)).verdict)
print(check(SquareFlatReshape.apply, torch.randn(4, 3)).results["incoming grads"])

# %%
# From the command line
# ---------------------
# ``python -m double_backward.checker module:Function`` checks a Function on random inputs:
# ``--shape`` for each input, ``--domain positive|complex|...`` or ``--range low,high`` for
# where they lie, ``--arg``, ``--arg-int-tensor 0,2,1`` and ``--kwarg name=value`` for extra
# arguments (or ``--setup module:function`` returning them), ``--surrogate-gradient``,
# ``--json`` for CI. It exits 0 when no problem is found, 1 when one is, 2 for a usage error
# or a Function that cannot be called. The same, run in this page on the tutorial's broken
# ``SinhBad``:
from double_backward.checker import main

status = main(["double_backward:SinhBad", "--shape", "2,3", "--domain", "positive"])
print(f"exit status: {status}")

# %%
# Conclusion
# ----------
# Trust a problem the checker reports: a check failed, and the diagnosis says which tensor is
# the likely cause and which page shows the fix. Read its notes too: they name patterns that
# did not break anything at these inputs. A passing verdict at default settings misses an
# error of 5% of the whole Hessian-vector product with a chance of at most about 1 in 4,000
# (the bound above: :math:`2.5 \times 10^{-4}`); an error confined to a few elements of large
# inputs is a smaller share of the whole and may be missed, as measured above. A verdict of
# "could not decide" means nothing was verified at your inputs. Next: the
# :doc:`failure gallery <plot_13_failure_gallery>` shows each broken pattern's symptom, and
# :doc:`plot_06_modern_api` what :mod:`torch.func` needs. When the op that breaks is a built-in
# inside a model (attention, ``cdist``), :func:`double_backward.check_model` finds it:
# :doc:`plot_14_builtins_without_double_backward`. Saved tensors edited in place:
# :doc:`plot_10_inplace_and_views`; graphs freed between two backwards:
# :doc:`plot_09_graph_lifetime`.
