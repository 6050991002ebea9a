r"""
Exercise: a custom op's backward
================================

``cube`` below is a ``torch.library.custom_op`` with its autograd registered, and its
backward calls a second custom op, ``cube_backward``. The first derivative passes. The second
raises, for the reason *Custom ops* gave. Download this page's script, fix it, and run it:
:func:`double_backward.check` says whether you got it right: its second order must pass.
"""

# %%
# The op to fix
# -------------
import torch

import double_backward


@torch.library.custom_op("exercise::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return x**3


@torch.library.custom_op("exercise::cube_backward", mutates_args=())
def cube_backward(x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    return 3 * x**2 * grad_out


@cube.register_fake
def _(x):
    return torch.empty_like(x)


@cube_backward.register_fake
def _(x, grad_out):
    return torch.empty_like(x)


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def backward(ctx, grad_out):
    (x,) = ctx.saved_tensors
    return cube_backward(x, grad_out)


cube.register_autograd(backward, setup_context=setup_context)

# %%
# The verdict
# -----------
x = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)
report = double_backward.check(cube, x)
print(report)

# %%
# The gradient's graph ends in ``cube_backward``'s node, which has no backward of its own.
from double_backward.graph import autograd_graph

x_leaf = x.clone().requires_grad_()
(grad_x,) = torch.autograd.grad(cube(x_leaf).sum(), x_leaf, create_graph=True)
autograd_graph(
    {"grad_x": grad_x},
    {"x": x_leaf},
    title="Graph of grad_x for cube: it ends in cube_backward's node",
)

# %%
# .. raw:: html
#
#    <details class="exercise-solution"><summary>The solution (open once you have tried)</summary>
#
# Give ``cube_backward`` its own autograd: the derivatives of :math:`3 x^2 g` are
# :math:`6 x g` in ``x`` and :math:`3 x^2` in ``g``, written with ops autograd records, so
# that third derivatives work too. (Run in the downloaded script, this replaces the buggy
# op's missing rule; the fixed op here gets new names so the page can check both.)


@torch.library.custom_op("exercise::cube_fixed", mutates_args=())
def cube_fixed(x: torch.Tensor) -> torch.Tensor:
    return x**3


@torch.library.custom_op("exercise::cube_fixed_backward", mutates_args=())
def cube_fixed_backward(x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    return 3 * x**2 * grad_out


@cube_fixed.register_fake
def _(x):
    return torch.empty_like(x)


@cube_fixed_backward.register_fake
def _(x, grad_out):
    return torch.empty_like(x)


def setup_backward_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward_of_backward(ctx, grad):
    x, grad_out = ctx.saved_tensors
    return grad * 6 * x * grad_out, grad * 3 * x**2


def fixed_backward(ctx, grad_out):
    (x,) = ctx.saved_tensors
    return cube_fixed_backward(x, grad_out)


cube_fixed_backward.register_autograd(
    backward_of_backward, setup_context=setup_backward_context
)
cube_fixed.register_autograd(fixed_backward, setup_context=setup_context)

fixed = double_backward.check(cube_fixed, x)
print(fixed)

# %%
# .. raw:: html
#
#    </details>
#
# Both verdicts, as the build measured them. The fixed op's second derivative passes; the one
# problem left is forward mode, which a custom op cannot have (no forward-mode rule can be
# registered: *Custom ops* shows its zero tangents), and which double backward does not use.
for name, verdict in (("cube", report), ("cube_fixed", fixed)):
    problems = [problem.name for problem in verdict.problems]
    print(
        f"{name:10}: second order {verdict.results['order 2, yours'][:6]}, problems {problems}"
    )
assert report.results["order 2, yours"] == "FAILED"
assert fixed.results["order 2, yours"].startswith("passed")
assert [problem.name for problem in fixed.problems] == ["forward-mode-mismatch"]
