r"""
Surrogate gradients: a backward that is not the derivative, on purpose
======================================================================

Rounding and a step have a derivative that is zero almost everywhere, and a clamp's is zero
wherever it clamps, so nothing trains through those points. A *surrogate gradient* replaces
its backward with the derivative :math:`s'` of some other function :math:`s`, chosen on
purpose: the straight-through estimator, gradient reversal (DANN), a clamp that lets
gradients pass, the spike of a spiking neuron. This page asks what
double backward means for them, shows what it should be, and checks each with
:func:`double_backward.check`'s surrogate-gradient mode.
"""

# %%
# The straight-through estimator
# ------------------------------
# :class:`~double_backward.functions.surrogates.RoundSTE` rounds in forward and passes the
# gradient through unchanged: the surrogate is :math:`s(x) = x`. ``torch.round``'s own gradient
# is zero.
#
# .. literalinclude:: /../src/double_backward/functions/surrogates.py
#    :pyobject: RoundSTE
import torch

from double_backward.functions.surrogates import RoundSTE

x = torch.tensor([0.3, -1.7, 2.2, -0.05], dtype=torch.float64, requires_grad=True)
print(f"round(x)              : {RoundSTE.apply(x).detach().numpy()}")
print(
    f"RoundSTE gradient     : {torch.autograd.grad(RoundSTE.apply(x).sum(), x)[0].numpy()}"
)
print(
    f"torch.round's gradient: {torch.autograd.grad(torch.round(x).sum(), x)[0].numpy()}"
)

# %%
# What its double backward should be
# ----------------------------------
# Backward computes :math:`g(\bar{y}, x) = s'(x)\,\bar{y}`, and double backward differentiates
# *that*, not forward: along :math:`\bar{y}` its derivative is :math:`s'(x)`, along :math:`x`
# it is :math:`s''(x)\,\bar{y}`. For the straight-through estimator: the identity, and zero.
# The part along :math:`\bar{y}` is what a gradient penalty needs. With
# :math:`L = \sum_i w_i\,\mathrm{round}(x_i)^2` and the penalty
# :math:`P = \lVert \partial L/\partial x \rVert^2`, :math:`\partial P/\partial w` runs through
# it. The reference is the detach trick, ``x + (x.round() - x).detach()``, in native ops:
w = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)


def penalty_gradients(rounding):
    loss = (w * rounding(x) ** 2).sum()
    (grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
    return torch.autograd.grad(grad_x.pow(2).sum(), (w, x), allow_unused=True)


for label, rounding in [
    ("RoundSTE    ", RoundSTE.apply),
    ("detach trick", lambda t: t + (t.round() - t).detach()),
]:
    d_w, d_x = penalty_gradients(rounding)
    # (+ 0 prints -0.0 as 0.0.)
    print(f"{label}: dP/dw {(d_w + 0).numpy()}   dP/dx {(d_x + 0).numpy()}")

# %%
# The graph of ``grad_x`` for ``RoundSTE`` in that loss: the penalty reaches ``w`` through it.
from double_backward.graph import autograd_graph

(grad_x,) = torch.autograd.grad(
    (w * RoundSTE.apply(x) ** 2).sum(), x, create_graph=True
)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x, "w": w},
    title="Graph of grad_x for RoundSTE in the penalty's loss",
)

# %%
# Through ``torch.round`` the penalty is zero
# -------------------------------------------
# Without the surrogate, :math:`\partial L/\partial x` is zero everywhere, a constant with no
# graph: the penalty is zero, and differentiating it raises.
try:
    print(f"torch.round : {penalty_gradients(torch.round)}")
except RuntimeError as error:
    print(f"torch.round : RuntimeError: {error}")

# %%
# Gradient reversal (DANN)
# ------------------------
# Domain-adversarial training puts
# :class:`~double_backward.functions.surrogates.GradientReversal` between the features and the
# domain classifier: the identity in forward, :math:`-\lambda\,\bar{y}` in backward, so the
# features learn to *fool* the classifier. :math:`s(x) = -\lambda x`, so double backward is
# :math:`-\lambda` along :math:`\bar{y}` and zero along :math:`x`.
#
# .. literalinclude:: /../src/double_backward/functions/surrogates.py
#    :pyobject: GradientReversal
from double_backward.functions.surrogates import GradientReversal

reversal = 0.5


def reverse_reference(t):  # value t, gradient -0.5: the detach trick again
    return t.detach() - reversal * (t - t.detach())


for label, reverse in [
    ("GradientReversal", lambda t: GradientReversal.apply(t, reversal)),
    ("detach trick    ", reverse_reference),
]:
    (grad_x,) = torch.autograd.grad((w * reverse(x)).sum(), x, create_graph=True)
    (d_w,) = torch.autograd.grad(grad_x.pow(2).sum(), w)
    print(f"{label}: grad_x {grad_x.detach().numpy()}   penalty's dP/dw {d_w.numpy()}")

# %%
# A clamp that lets gradients pass
# --------------------------------
# Clamped actions, pixels or latent codes still need a gradient where the clamp is active.
# :class:`~double_backward.functions.surrogates.ClampPassThrough` clamps to :math:`[-1, 1]` and
# passes ``grad_out`` through everywhere, where ``torch.clamp`` gives zero outside:
#
# .. literalinclude:: /../src/double_backward/functions/surrogates.py
#    :pyobject: ClampPassThrough
from double_backward.functions.surrogates import ClampPassThrough

for label, clamp in [
    ("ClampPassThrough", ClampPassThrough.apply),
    ("torch.clamp     ", torch.clamp),
]:
    values = clamp(x, -1.0, 1.0)
    (grad_x,) = torch.autograd.grad(values.sum(), x)
    print(f"{label}: y {values.detach().numpy()}   grad_x {grad_x.numpy()}")

# %%
# A surrogate that depends on x: the spiking neuron
# -------------------------------------------------
# A spiking neuron fires, :math:`y = [x > 0]`. SuperSpike's surrogate is the derivative of the
# fast sigmoid :math:`s(x) = x / (1 + k|x|)`: :math:`s'(x) = 1/(1 + k|x|)^2`. Now the part of
# double backward along :math:`x` is not zero: :math:`s''(x) = -2k\,\mathrm{sign}(x) / (1 +
# k|x|)^3`. Backward computes :math:`s'` from the saved *input*, with recorded operations, so
# autograd differentiates it.
#
# .. literalinclude:: /../src/double_backward/functions/surrogates.py
#    :pyobject: FastSigmoidSpike
from double_backward.functions.surrogates import FastSigmoidSpike

slope = 5.0
(grad_x,) = torch.autograd.grad(
    FastSigmoidSpike.apply(x, slope).sum(), x, create_graph=True
)
(grad2_x,) = torch.autograd.grad(grad_x.sum(), x)
expected = -2 * slope * torch.sign(x) / (1 + slope * x.abs()) ** 3
print(f"spikes          : {FastSigmoidSpike.apply(x, slope).detach().numpy()}")
print(f"s'(x)           : {grad_x.detach().numpy().round(5)}")
print(f"double backward : {grad2_x.numpy().round(5)}")
print(f"s''(x), analytic: {expected.detach().numpy().round(5)}")

# %%
# The checker's default mode rejects every surrogate here
# -------------------------------------------------------
# :func:`double_backward.check` compares backward with forward's derivative first, and a
# surrogate differs from it on purpose wherever it replaces it: a ``first-order`` problem,
# whose message says what to do about it. (``ClampPassThrough`` differs only outside
# ``[min, max]``: checked only at points inside, it passes, as the last line shows.)
from double_backward import check

surrogates = {
    "RoundSTE": RoundSTE.apply,
    "GradientReversal": lambda t: GradientReversal.apply(t, reversal),
    "ClampPassThrough": ClampPassThrough.apply,
    "FastSigmoidSpike": lambda t: FastSigmoidSpike.apply(t, slope),
}
for name, fn in surrogates.items():
    print(f"{name:17} default mode: {sorted(check(fn, x).problem_names())}")
inside = torch.tensor([-0.5, 0.25, 0.75], dtype=torch.float64)
inside_verdict = check(ClampPassThrough.apply, inside).verdict
print(f"ClampPassThrough at {inside.tolist()} only: {inside_verdict}")
print(check(RoundSTE.apply, x).problems[0].diagnosis)

# %%
# The surrogate-gradient mode
# ---------------------------
# ``surrogate_gradient=True`` (``--surrogate-gradient`` on the command line) takes the first
# derivative as given, and checks what double backward should be: backward linear in
# ``grad_out``, and its derivative, computed by double backward, against central differences of
# backward itself.
for name, fn in surrogates.items():
    print(f"{name:17} {check(fn, x, surrogate_gradient=True).verdict}")

# %%
# It still catches a broken double backward (broken on purpose)
# -------------------------------------------------------------
# :class:`~double_backward.functions.surrogates.FastSigmoidSpikeSavesSurrogate` computes
# :math:`s'(x)` in forward and saves it: an intermediate with no history, so the
# :math:`s''` term is lost, the trap of :doc:`/auto_examples/tutorial/plot_03_saving_intermediates`.
#
# .. literalinclude:: /../src/double_backward/functions/surrogates.py
#    :pyobject: FastSigmoidSpikeSavesSurrogate
from double_backward.functions.surrogates import FastSigmoidSpikeSavesSurrogate

broken_spike = lambda t: FastSigmoidSpikeSavesSurrogate.apply(t, slope)  # noqa: E731
print(
    check(
        broken_spike, x, surrogate_gradient=True, name="FastSigmoidSpikeSavesSurrogate"
    )
)

# %%
# Conclusion
# ----------
# A surrogate backward is a choice; once made, double backward has one right answer: the
# derivative of that backward, :math:`s'` along ``grad_out`` and :math:`s''` along the input,
# never forward's second derivative. Write the surrogate with recorded operations on saved
# inputs, check it against the detach trick in native ops, and run
# ``check(fn, x, surrogate_gradient=True)``.
#
# Next: the mistakes that break double backward, each with its fix, in
# :doc:`/auto_examples/when_it_breaks/plot_13_failure_gallery`.
