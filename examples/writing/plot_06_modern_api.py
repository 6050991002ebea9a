r"""
The modern API: ``setup_context``, ``torch.func`` and forward mode
==================================================================

PyTorch's tutorial writes ``forward(ctx, x)``. That style still works with
:func:`torch.autograd.grad`, but :mod:`torch.func` (``vmap``, ``grad``, ``jacrev``,
``hessian``) refuses it. The modern style splits ``forward`` (no ``ctx``) from
``setup_context``. A ``jvp`` staticmethod makes forward-mode AD work, which
``torch.func.hessian`` needs. A ``jvp`` has two costs, both run below: every Function that
backward calls needs one as well, and ``torch.compile`` cannot trace a Function that has one
when an input requires grad. This page runs both styles and every transform against the
native op.
"""

# %%
# The two styles side by side
# ---------------------------
# The old style, from :doc:`/auto_examples/tutorial/plot_01_saving_inputs`:
#
# .. literalinclude:: /../src/double_backward/functions/saving_inputs.py
#    :pyobject: Square
#
# The modern style: ``forward`` only computes; ``setup_context`` receives the inputs and the
# output and fills ``ctx``. ``ctx.save_for_forward`` keeps ``x`` for ``jvp``, the
# forward-mode derivative :math:`\dot{y} = 2x\,\dot{x}`.
#
# .. literalinclude:: /../src/double_backward/functions/setup_context_style.py
#    :pyobject: Square
#
# The old style under ``torch.func``: a loud error
# ------------------------------------------------
import torch
from torch.func import grad, hessian, jacrev, jvp, vmap

from double_backward import Square as OldSquare
from double_backward.functions import setup_context_style as modern

torch.manual_seed(0)
x = torch.randn(4, dtype=torch.float64)
try:
    vmap(OldSquare.apply)(x)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# The modern style under every transform
# --------------------------------------
# Each result is compared with the same transform of the native op; the printed number is the
# largest absolute difference.
FUNCTIONS = {
    "Square": (modern.Square.apply, lambda t: t**2),
    "Exp": (modern.Exp.apply, torch.exp),
    "Cube": (modern.Cube.apply, lambda t: t**3),
}
TRANSFORMS = {
    "vmap(f)": lambda f: vmap(f)(x),
    "vmap(grad(grad(f)))": lambda f: vmap(grad(grad(f)))(x),
    "jacrev(jacrev(sum f))": lambda f: jacrev(jacrev(lambda t: f(t).sum()))(x),
    "hessian(sum f)": lambda f: hessian(lambda t: f(t).sum())(x),
}
for name, (ours, native) in FUNCTIONS.items():
    for transform_name, transform in TRANSFORMS.items():
        difference = (transform(ours) - transform(native)).abs().max().item()
        print(f"{name:7} {transform_name:22} max |ours - native| = {difference:.1e}")

# %%
# ``hessian`` needs ``jvp``
# -------------------------
# :func:`torch.func.hessian` is forward mode over reverse mode. Without a ``jvp``
# staticmethod, reverse mode still works but forward mode raises
# (:class:`~double_backward.functions.failures.SquareWithoutJvp` is the modern ``Square``
# minus ``jvp``):
from double_backward.functions.failures import SquareWithoutJvp

jacobian = jacrev(SquareWithoutJvp.apply)(x)
print(f"jacrev without jvp works: diagonal {jacobian.diagonal().numpy().round(4)}")
try:
    hessian(lambda t: SquareWithoutJvp.apply(t).sum())(x)
except NotImplementedError as error:
    print(f"NotImplementedError: {error}")

# %%
# ... and so does every Function backward calls
# ---------------------------------------------
# ``hessian`` pushes the tangent through backward too. If backward calls another Function, that
# one needs its own ``jvp``: with a ``jvp`` on the outer Function only, ``hessian`` fails with an
# internal error that does not name the missing rule.
#
# .. literalinclude:: /../src/double_backward/functions/failures.py
#    :pyobject: CubeJvpOnOuterOnly
from double_backward.functions.failures import CubeJvpOnOuterOnly

try:
    hessian(lambda t: CubeJvpOnOuterOnly.apply(t).sum())(x)
except AssertionError as error:
    print(f"jvp on the outer Function only: AssertionError: {error}")
both = hessian(lambda t: modern.Cube.apply(t).sum())(x).diagonal()
print(f"jvp on both (modern Cube):      diagonal {both.numpy().round(4)}  (6x)")

# %%
# A ``jvp`` stops ``torch.compile``
# ---------------------------------
# Dynamo refuses to trace a Function that defines ``jvp`` when an input requires grad, as in
# training. With ``fullgraph=True`` that is an error; without it the Function runs eagerly at
# a graph break (:doc:`/auto_examples/beyond_python/plot_19_torch_compile`).
#
# Below, both Functions with a ``jvp`` here, ``Square`` and ``Cube``, are compiled with
# ``backend="aot_eager"`` and ``fullgraph=True``: they compile only while no input requires
# grad, and then there is no gradient to take. The build fails if a torch release compiles
# them with an input that requires grad, and the gradients are then compared with the eager
# ones. So give a Function a ``jvp`` when forward mode or ``hessian`` will use it, not by
# default.
for function in (modern.Square, modern.Cube):
    for requires_grad in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(function.apply, backend="aot_eager", fullgraph=True)
        leaf = x.detach().requires_grad_(requires_grad)
        try:
            out = compiled(leaf)
        except Exception as error:
            explanation = next(line.strip() for line in str(error).splitlines()
                               if "Explanation" in line)
            print(f"{function.__name__:6} input requires grad: {requires_grad!s:5}  "
                  f"{type(error).__name__}: {str(error).splitlines()[0]}\n{'':35}{explanation}")
            continue
        if requires_grad:  # the page's claim no longer holds: check the gradient, and say so
            (compiled_grad,) = torch.autograd.grad(out.sum(), leaf)
            (eager_grad,) = torch.autograd.grad(function.apply(leaf).sum(), leaf)
            torch.testing.assert_close(compiled_grad, eager_grad)
            raise RuntimeError(f"{function.__name__} with a jvp now compiles with an input "
                               "that requires grad: this section's claim is out of date")
        print(f"{function.__name__:6} input requires grad: {requires_grad!s:5}  compiles")

# %%
# A NumPy forward under ``vmap``
# ------------------------------
# ``generate_vmap_rule = True`` runs forward on vmap's batched tensors. For torch operations
# that is fine; NumPy cannot read them. Here is ``CubeBackward`` (the NumPy backward of ``Cube``)
# with a generated rule, **broken on purpose**:
from double_backward.functions.failures import CubeBackwardNumpyUnderVmap

batch = torch.randn(5, 4, dtype=torch.float64)
try:
    vmap(CubeBackwardNumpyUnderVmap.apply)(torch.ones_like(batch), batch)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# The fix is a ``vmap`` staticmethod that receives plain tensors and where their batch
# dimensions are, and returns the batched result and its batch dimension. For an elementwise
# NumPy computation: move the batch dimension first and run NumPy on the whole batch.
#
# .. literalinclude:: /../src/double_backward/functions/setup_context_style.py
#    :pyobject: CubeBackward
batched = vmap(modern.CubeBackward.apply)(torch.ones_like(batch), batch)
print(
    f"vmap with the hand-written rule: max error {(batched - 3 * batch**2).abs().max():.1e}"
)

# %%
# Forward-over-reverse equals reverse-over-reverse
# ------------------------------------------------
# A Hessian-vector product :math:`Hv` can be taken as the forward-mode derivative of the
# gradient (``jvp(grad(f))``, forward over reverse) or as the gradient of
# :math:`\nabla f \cdot v` (reverse over reverse, double backward, written out below). With a
# correct ``jvp`` and ``backward`` the two agree.
v = torch.randn_like(x)


def f(t):
    return modern.Cube.apply(t).sum()


forward_over_reverse = jvp(grad(f), (x,), (v,))[1]
x_leaf = x.clone().requires_grad_()
(grad_f,) = torch.autograd.grad(f(x_leaf), x_leaf, create_graph=True)
(reverse_over_reverse,) = torch.autograd.grad(grad_f, x_leaf, v)  # the gradient of grad_f . v
print(f"forward over reverse: {forward_over_reverse.numpy().round(6)}")
print(f"reverse over reverse: {reverse_over_reverse.numpy().round(6)}")
torch.testing.assert_close(forward_over_reverse, reverse_over_reverse)

# %%
# The graph of ``grad_f``, the gradient that the reverse-over-reverse product differentiated:
# a graph back to ``x``, recorded because ``create_graph=True``.
from double_backward.graph import autograd_graph

# (Drawn from a fresh grad_f: the product above freed the first one's saved tensors.)
(grad_f,) = torch.autograd.grad(f(x_leaf), x_leaf, create_graph=True)
autograd_graph(
    {"grad_f": grad_f},
    {"x": x_leaf},
    title="Graph of grad_f for the setup_context Cube, back to x",
)

# %%
# Takeaway
# --------
# Write new Functions in the ``setup_context`` style, give them a ``jvp`` when forward mode
# may be used (and to every Function their backward calls; not where ``torch.compile`` must
# trace them), and a vmap rule (generated for torch operations, hand-written otherwise).
# :func:`double_backward.check` reports which transforms a Function supports. Next:
# :doc:`/auto_examples/writing/plot_07_deriving_double_backward`, for ops that are not elementwise.
