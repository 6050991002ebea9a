"""Write the error-message index from messages raised at build time.

Each scenario below runs a wrong pattern from ``double_backward`` and captures the exact
message the installed torch raises, so the index stays true when torch changes its wording.
The other tested torch releases' messages come from ``docs/_data/error_index/`` (written by
``nox -s matrix``, see ``versioned_results.py``); where two releases differ, the index shows
both. The sections are written to ``_generated/error_messages.md``, which ``errors.md``
includes. To add a scenario, append a ``(title, scenario, cause, fix, page)`` entry to
:data:`SCENARIOS`; until ``nox -s matrix`` runs again, the other releases show it as not measured.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import cuda_results
from source_digest import digest, regenerate
from sphinx.application import Sphinx
from versioned_results import Measurement, by_version, committed_files

# Raised by torch.compile's own tracing of an old-style Function, not by the code traced.
TORCH_INTERNAL_WARNING = (
    "<class 'torch.autograd.function.Function'> should not be instantiated"
)


def _grad_x(fn, x, grad_out=None):
    import torch

    output = fn(x)
    output = output[0] if isinstance(output, tuple) else output
    grad_out = torch.ones_like(output) if grad_out is None else grad_out
    return torch.autograd.grad(output, x, grad_out, create_graph=True)[0]


def _penalty_under(mode) -> None:
    """A PINN residual's second derivative computed inside ``mode``, as an eval loop runs it."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    )
    with mode():
        x = torch.linspace(0, 1, 5).unsqueeze(1).requires_grad_()
        u = model(x)
        (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
        torch.autograd.grad(du.sum(), x)


def _under_no_grad() -> None:
    import torch

    _penalty_under(torch.no_grad)


def _under_inference_mode() -> None:
    import contextlib

    import torch

    @contextlib.contextmanager
    def inference_then_enable_grad():
        # What a Lightning validation_step that calls torch.enable_grad() gets by default:
        # enable_grad does not leave inference mode.
        with torch.inference_mode(), torch.enable_grad():
            yield

    _penalty_under(inference_then_enable_grad)


def _inference_tensor_saved() -> None:
    import torch

    model = torch.nn.Linear(1, 1)
    with torch.inference_mode():
        # A batch as a DataLoader under inference mode hands it over:
        batch = torch.linspace(0, 1, 5).unsqueeze(1)
    model(batch).sum().backward()


def _inference_tensor_requires_grad() -> None:
    import torch

    with torch.inference_mode():
        batch = torch.linspace(0, 1, 5).unsqueeze(1)
    batch.requires_grad_()  # to differentiate with respect to the batch (a PINN's x)


def _reentrant_checkpoint_grad() -> None:
    import torch
    from torch.utils.checkpoint import checkpoint

    layer = torch.nn.Linear(3, 1)
    x = torch.randn(2, 3, requires_grad=True)
    torch.autograd.grad(checkpoint(layer, x, use_reentrant=True).sum(), x)


# Raised by torch's own modules that inductor imports (torch.utils.mkldnn), not by the code.
TORCH_JIT_DEPRECATION = "`torch.jit.script_method` is deprecated"


def _inductor_donated_buffer() -> None:
    import torch
    import torch._functorch.config as functorch_config

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", TORCH_JIT_DEPRECATION, DeprecationWarning)
        import torch._inductor.compile_fx  # noqa: F401 - what torch.compile imports
        import torch._inductor.config as inductor_config

    weight = torch.randn(4, 4, requires_grad=True)

    def layer(x):
        return torch.tanh(x @ weight) @ weight

    x = torch.randn(3, 4, requires_grad=True)
    torch._dynamo.reset()
    # No cache: a cached graph would be reused as compiled by an earlier build or run.
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        compiled = torch.compile(layer)  # the default backend, inductor
        compiled(x).pow(2).sum().backward()  # a training step compiles the backward
        loss = compiled(x).pow(2).sum()
        torch.autograd.grad(loss, x, create_graph=True)  # then a gradient penalty


def _old_style_under_torch_func() -> None:
    import torch

    from double_backward import Square

    torch.func.vmap(Square.apply)(torch.ones(2, 3))


def _no_graph() -> None:
    import torch

    from double_backward import SinhBad

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    torch.autograd.grad(_grad_x(SinhBad.apply, x).sum(), x)


def _graph_misses_input() -> None:
    import torch

    from double_backward.functions.failures import SquareOnceDifferentiable

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    grad_out = torch.ones_like(x, requires_grad=True)
    torch.autograd.grad(_grad_x(SquareOnceDifferentiable.apply, x, grad_out).sum(), x)


def _once_differentiable() -> None:
    import torch

    from double_backward.functions.failures import SquareOnceDifferentiable

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    grad_out = torch.ones_like(x, requires_grad=True)
    _grad_x(SquareOnceDifferentiable.apply, x, grad_out).sum().backward()


def _once_differentiable_loss(loss):
    """The second derivative of ``loss(x, y)``, ``y = SquareOnceDifferentiable.apply(x)``,
    asked with ``torch.autograd.grad``: what it raises, or the values it returns."""
    import torch

    from double_backward.functions.failures import SquareOnceDifferentiable

    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    y = SquareOnceDifferentiable.apply(x)
    (grad_x,) = torch.autograd.grad(loss(x, y), x, create_graph=True)
    return x, torch.autograd.grad(grad_x.sum(), x)[0]


def _once_differentiable_whole_loss() -> None:
    _once_differentiable_loss(lambda x, y: y.sum())


def _once_differentiable_composed_loss() -> None:
    _once_differentiable_loss(lambda x, y: y.sin().sum())


def once_differentiable_silent() -> tuple[list[float], list[float]]:
    """``y.sum() + (x**3).sum()`` through ``@once_differentiable``: (what grad returns, the
    right second derivative ``2 + 6x``). Raises if it raised, or returned the right one."""
    x, second = _once_differentiable_loss(lambda x, y: y.sum() + (x**3).sum())
    right = 2 + 6 * x.detach()
    if second.allclose(right):
        raise FixIsWrong("@once_differentiable beside another term: no longer silent")
    return second.tolist(), right.tolist()


def _no_jvp() -> None:
    import torch

    from double_backward.functions.failures import SquareWithoutJvp

    torch.func.hessian(lambda t: SquareWithoutJvp.apply(t).sum())(torch.ones(3))


def _numpy_under_vmap() -> None:
    import torch

    from double_backward.functions.failures import CubeBackwardNumpyUnderVmap

    batch = torch.ones(2, 3)
    torch.func.vmap(CubeBackwardNumpyUnderVmap.apply)(batch, batch)


def _gradgradcheck_mismatch() -> None:
    import torch
    from torch.autograd import gradgradcheck

    from double_backward.functions.failures import SquareDetachesInBackward

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    # gradgradcheck draws its incoming gradients at random, and the whole message prints them.
    torch.manual_seed(0)
    gradgradcheck(SquareDetachesInBackward.apply, (x,))


def _compile_double_backward() -> None:
    import torch

    from double_backward import Square

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()  # a fresh compile: no cache, no recompile limit reached earlier
    compiled = torch.compile(Square.apply, backend="aot_eager")
    with warnings.catch_warnings():
        # Dynamo itself instantiates the Function while tracing it, which torch deprecates.
        warnings.filterwarnings("ignore", TORCH_INTERNAL_WARNING)
        torch.autograd.grad(_grad_x(compiled, x).sum(), x)


def _custom_op_without_autograd() -> None:
    import torch

    from double_backward.functions.failures import cube_with_untracked_backward

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    torch.autograd.grad(_grad_x(cube_with_untracked_backward, x).sum(), x)


def _cpp_function_under_torch_func() -> None:
    import torch

    from double_backward.functions.cpp_extension import cube

    torch.func.vmap(cube)(torch.ones(2, 3, dtype=torch.float64))


def _gradgradcheck_second_derivative_missing() -> None:
    import torch
    from torch.autograd import gradgradcheck

    from double_backward.functions.cpp_extension import cube_untracked

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    gradgradcheck(cube_untracked, (x,))


# -- built-ins whose double backward raises (the built-ins table lists them all) ------------
def _builtin_penalty(fn, *inputs) -> None:
    """A gradient penalty through a built-in: grad with create_graph, then a second backward."""
    import torch

    output = fn(*inputs)
    grads = torch.autograd.grad(output.sum(), inputs, create_graph=True)
    torch.autograd.grad(sum((g**2).sum() for g in grads), inputs)


def _builtin_sdpa() -> None:
    import torch

    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    _builtin_penalty(torch.nn.functional.scaled_dot_product_attention, q, k, v)


# The fused CUDA attention kernels, run on the meta device: shapes and no data, and the same
# derivative formulas as on a GPU, so a build with no GPU raises their messages word for word.
# Keyword arguments: the efficient and cuDNN kernels keep their logsumexp only on request,
# and their backward needs it.
FUSED_CUDA_KERNELS = {
    "flash": ("_scaled_dot_product_flash_attention", {}),
    "memory-efficient": ("_scaled_dot_product_efficient_attention",
                         {"attn_bias": None, "compute_log_sumexp": True}),
    "cuDNN": ("_scaled_dot_product_cudnn_attention",
              {"attn_bias": None, "compute_log_sumexp": True}),
}  # fmt: skip


# check_model's fix for these kernels says the same (checker/shared/cuda_fixes.py; tested).
CUDA_ATTENTION_FIX = (
    "Run attention under `sdpa_kernel(SDPBackend.MATH)` (it keeps the L × S attention "
    "matrix), call `double_backward.ops.scaled_dot_product_attention`, or run the model's "
    "forward inside `with double_backward.ops.replaced():`."
)
CUDA_PAGE = "auto_examples/builtins_and_models/plot_21_on_the_gpu"


def fused_cuda_attention(kernel: str) -> Callable[[], None]:
    """A gradient penalty through one fused CUDA attention kernel, on the meta device."""

    def scenario() -> None:
        import torch

        name, options = FUSED_CUDA_KERNELS[kernel]
        q, k, v = (torch.empty(1, 2, 8, 16, device="meta", requires_grad=True)
                   for _ in range(3))  # fmt: skip
        output = getattr(torch.ops.aten, name)(q, k, v, **options)[0]
        _builtin_penalty(lambda *_: output, q, k, v)

    scenario.__name__ = f"_fused_cuda_attention_{kernel.replace('-', '_').lower()}"
    return scenario


def sdpa_condition() -> str:
    """Which SDPA calls raise at the second backward on the CPU, run now on the installed
    torch: the fused CPU kernel takes 4-D inputs without dropout, ``dropout_p > 0`` takes the
    math path; 3-D inputs take the math path on torch 2.13 and the fused kernel on 2.14.1, so
    the sentence says what this release did."""
    import torch

    def raises(shape, dropout_p):
        q = torch.randn(*shape, generator=torch.Generator().manual_seed(0), requires_grad=True)
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=dropout_p)
        (grad,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
        try:
            grad.sum().backward()
        except RuntimeError:
            return True
        return False

    four_d, three_d = raises((1, 2, 8, 8), 0.0), raises((2, 8, 8), 0.0)
    dropout = raises((1, 2, 8, 8), 0.1)
    if not four_d or dropout:
        # The entry above, and its fix, are about the fused kernel raising; dropout is the
        # way out the sentence offers.
        raise FixIsWrong(
            f"SDPA's double backward on the CPU changed: 4-D without dropout raises: {four_d}, "
            f"4-D with dropout_p = 0.1 raises: {dropout}"
        )
    release = torch.__version__.split("+")[0]
    if three_d:
        where = ("3-D inputs (batch, length, features) raise too; with `dropout_p > 0` attention "
                 "takes the math path and double backward works")  # fmt: skip
    else:
        where = ("with 3-D inputs, or with `dropout_p > 0`, attention takes the math path "
                 "and double backward works")  # fmt: skip
    return (
        f"On torch {release}, it raises for 4-D inputs (batch, heads, length, features) "
        f"without dropout, which take the fused CPU kernel; {where} (run at build time)."
    )


def _builtin_cdist() -> None:
    import torch

    x1 = torch.randn(5, 3, requires_grad=True)  # fewer than 26 rows
    x2 = torch.randn(5, 3, requires_grad=True)
    _builtin_penalty(torch.cdist, x1, x2)


def _builtin_pdist() -> None:
    import torch

    _builtin_penalty(torch.nn.functional.pdist, torch.randn(5, 3, requires_grad=True))


def _builtin_hardsigmoid() -> None:
    import torch

    x = torch.randn(5, requires_grad=True)
    _builtin_penalty(lambda t: torch.nn.functional.hardsigmoid(t) ** 2, x)


def _builtin_ctc_loss() -> None:
    import torch

    log_probs = torch.randn(6, 1, 4).log_softmax(2).detach().requires_grad_()
    targets = torch.tensor([[1, 2]])
    _builtin_penalty(
        lambda t: torch.nn.functional.ctc_loss(t, targets, [6], [2]), log_probs
    )


def _builtin_multi_margin_loss() -> None:
    import torch

    x = torch.randn(3, 4, requires_grad=True)
    target = torch.tensor([0, 1, 3])
    _builtin_penalty(lambda t: torch.nn.functional.multi_margin_loss(t, target), x)


# The entries of grad mode turned off outside the code that raises: they print the message
# of "The gradient has no graph" too, and come before it.
GRAD_MODE_TITLES = (
    "Grad mode is off: torch.no_grad",
    "Inference mode: torch.inference_mode, Lightning's validation and test steps",
)

RECIPE_GRAD_MODE = "auto_examples/recipes/plot_01_grad_mode_in_eval_loops"


def multi_margin_loss_by_hand(x, target, margin: float = 1.0):
    """``F.multi_margin_loss(x, target, margin=margin)`` (p = 1, no weight, mean) with ops that
    have a double backward: the fix the index prints, checked against the loss at build time."""
    import torch

    x_target = x.gather(1, target[:, None])
    terms = torch.clamp(margin - x_target + x, min=0)
    own = torch.arange(x.shape[1], device=x.device) == target[:, None]  # i = y: left out
    return torch.where(own, 0, terms).sum(1).div(x.shape[1]).mean()


MULTI_MARGIN_FIX = (
    "Write the loss with differentiable ops: `clamp(margin - x[y] + x, min=0)` without the "
    "target's own term (i = y), summed over the C classes and divided by C, then averaged "
    "over the batch: `torch.where(i == y, 0, terms).sum(1).div(C).mean()`. Checked at build "
    "time against `F.multi_margin_loss` (p = 1, no weight): the value, the gradient, and the "
    "second derivative through a smooth input (`tanh`) against central differences of the "
    "loss's own gradient."
)


class FixIsWrong(RuntimeError):
    """A fix the index prints does not compute what it replaces."""


def check_multi_margin_fix() -> dict[str, float]:
    """The largest differences between :func:`multi_margin_loss_by_hand` and
    ``F.multi_margin_loss``: value, gradient, and Hessian-vector product of
    ``z -> loss(tanh(z))`` (the loss's own second derivative, which torch cannot take, from
    central differences of its first). Raises :class:`FixIsWrong` beyond float64 rounding."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    z = torch.randn(6, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    u = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    target = torch.tensor([0, 1, 2, 3, 4, 1])

    def by_hand(t):
        return multi_margin_loss_by_hand(torch.tanh(t), target)

    def torch_loss(t):
        return F.multi_margin_loss(torch.tanh(t), target)

    def torch_gradient(t):
        t = t.detach().requires_grad_()
        return torch.autograd.grad(torch_loss(t), t)[0]

    (grad,) = torch.autograd.grad(by_hand(z), z, create_graph=True)
    (hvp,) = torch.autograd.grad((grad * u).sum(), z)
    h = 1e-5  # tanh's curvature is O(1) and no hinge is within 1e-3 at this seed (checked below)
    with torch.no_grad():
        margins = (1 - torch.tanh(z).gather(1, target[:, None]) + torch.tanh(z)).abs()
    if margins.min() < 1e-3:
        raise FixIsWrong("check_multi_margin_fix: a hinge lies too near the point")
    central = (torch_gradient(z + h * u) - torch_gradient(z - h * u)) / (2 * h)
    errors = {
        "value": (by_hand(z) - torch_loss(z)).abs().item(),
        "gradient": (grad - torch_gradient(z)).abs().max().item(),
        "second derivative": (hvp - central).abs().max().item(),
        "second derivative (scale)": central.abs().max().item(),
    }
    curvature = max(1.0, errors["second derivative (scale)"])
    if (errors["value"] > 1e-12 or errors["gradient"] > 1e-12
            or errors["second derivative"] > 1e-6 * curvature):  # fmt: skip
        raise FixIsWrong(f"the multi_margin_loss fix differs from F.multi_margin_loss: {errors}")
    return errors


# (title, scenario, cause, fix, page)
SCENARIOS: list[tuple[str, Callable[[], None], str, str, str]] = [
    # Grad mode first: the commonest cause of "does not require grad", and not in your code.
    ("Grad mode is off: torch.no_grad", _under_no_grad,
     "The gradient was taken inside `torch.no_grad()` (an evaluation loop, a callback, a "
     "metric): no graph was recorded, so there is nothing to differentiate.",
     "Take it under `torch.enable_grad()`, which turns `no_grad` off for its block.",
     RECIPE_GRAD_MODE),
    ("Inference mode: torch.inference_mode, Lightning's validation and test steps",
     _under_inference_mode,
     "The gradient was taken inside `torch.inference_mode()`, which `torch.enable_grad()` "
     "does not turn off. PyTorch Lightning runs `validation_step`, `test_step` and "
     "`predict_step` under it by default (`Trainer(inference_mode=True)`).",
     "`Trainer(inference_mode=False)` (Lightning then uses `no_grad`) and "
     "`torch.enable_grad()` inside the step; in plain torch, `torch.inference_mode(False)` or "
     "`no_grad` in place of inference mode.",
     RECIPE_GRAD_MODE),
    ("Inference tensors cannot be saved for backward", _inference_tensor_saved,
     "A tensor made under `torch.inference_mode()` (a batch, a cached buffer) is used in "
     "autograd after inference mode ends.",
     "`batch.clone()` outside inference mode gives a normal tensor; or make it under "
     "`no_grad` instead.",
     RECIPE_GRAD_MODE),
    ("An inference tensor made to require grad", _inference_tensor_requires_grad,
     "`requires_grad_()` on a tensor made under `torch.inference_mode()` (a batch an "
     "evaluation loop handed over), to differentiate with respect to it.",
     "`batch.clone().requires_grad_()` outside inference mode.",
     RECIPE_GRAD_MODE),
    ("The gradient has no graph", _no_graph,
     "Grad mode was off where the graph should have been recorded (the first two "
     "sections); or, from a custom Function, backward used tensors without history "
     "(stashed on `ctx`, saved intermediates, detached, or computed outside torch).",
     "Save inputs and outputs; return intermediates as extra outputs; wrap non-torch code "
     "in a Function of its own.",
     "auto_examples/tutorial/plot_03_saving_intermediates"),
    ("The graph misses the input", _graph_misses_input,
     "The gradient has a graph, but only to the incoming gradient `grad_out`, not to `x`: "
     "here a `@once_differentiable` backward given a `grad_outputs` that requires grad.",
     "As above; if backward is `@once_differentiable`, that is by design.",
     "auto_examples/when_it_breaks/plot_13_failure_gallery"),
    ("Marked once differentiable", _once_differentiable,
     "Backward is marked `@once_differentiable` (first order only, by declaration), and "
     "the second derivative is asked with `.backward()` while the incoming gradient requires "
     "grad.",
     "Write backward with differentiable operations and remove the decorator.",
     "auto_examples/writing/plot_08_higher_orders"),
    ("gradgradcheck finds a mismatch", _gradgradcheck_mismatch,
     "`gradgradcheck`: the analytical second derivative differs from finite differences, "
     "often all zeros.",
     "Find which pattern of the failure gallery applies; `double_backward.check` names it.",
     "auto_examples/when_it_breaks/plot_13_failure_gallery"),
    ("gradgradcheck finds no second derivative", _gradgradcheck_second_derivative_missing,
     "`gradgradcheck`: the first derivative has no graph, so its analytical derivative is "
     "taken as zero, while finite differences of it are not.",
     "Make backward differentiable: call a Function (or operator) with its own backward "
     "where backward leaves autograd.",
     "auto_examples/beyond_python/plot_18_cpp_extension"),
    ("Old style under torch.func", _old_style_under_torch_func,
     "A Function in the `forward(ctx, ...)` style used under `torch.func`.",
     "Split `setup_context` out of `forward`.",
     "auto_examples/writing/plot_06_modern_api"),
    ("No jvp for forward mode", _no_jvp,
     "Forward mode (`jvp`, `jacfwd`, `hessian`) through a Function without a `jvp`.",
     "Add a `jvp` staticmethod; keep what it needs with `ctx.save_for_forward`.",
     "auto_examples/writing/plot_06_modern_api"),
    ("NumPy forward under vmap", _numpy_under_vmap,
     "`generate_vmap_rule = True` on a Function whose forward uses NumPy.",
     "Write a `vmap` staticmethod that runs the NumPy code on the whole batch.",
     "auto_examples/writing/plot_06_modern_api"),
    ("Double backward through torch.compile", _compile_double_backward,
     "A gradient taken with `create_graph=True` through a `torch.compile`d function is "
     "differentiated again: AOTAutograd compiles first-order backward only.",
     "Compile the first-order part only, and take higher orders in eager mode.",
     "auto_examples/beyond_python/plot_19_torch_compile"),
    ("Inductor's donated buffers and create_graph", _inductor_donated_buffer,
     "`torch.compile` with its default backend (inductor) compiled the backward for one "
     "use only, freeing the tensors it saved (donated buffers); a later backward with "
     "`create_graph=True` or `retain_graph=True` through the same compiled code is refused.",
     "`torch._functorch.config.donated_buffer = False` before compiling. That gives a "
     "first derivative with a graph; a second backward through compiled code then raises "
     "the message of the section above.",
     "auto_examples/recipes/plot_02_inductor_donated_buffers"),
    ("autograd.grad through a reentrant checkpoint", _reentrant_checkpoint_grad,
     "`torch.utils.checkpoint(..., use_reentrant=True)` supports `.backward()` only: "
     "its first pass runs under `no_grad`, so `autograd.grad` (and a gradient taken inside "
     "the block, which then raises \"does not require grad\") cannot go through it.",
     "`use_reentrant=False`.",
     "auto_examples/recipes/plot_06_grad_inside_checkpoint"),
    ("Custom operator without autograd", _custom_op_without_autograd,
     "An operator made with `torch.library.custom_op` and no `register_autograd` is "
     "differentiated, often inside another operator's backward (at the second order).",
     "Call `register_autograd` on that operator too, with a backward that is differentiable.",
     "auto_examples/beyond_python/plot_17_custom_ops"),
    ("C++ Function under torch.func", _cpp_function_under_torch_func,
     "A C++ `torch::autograd::Function` used under `torch.func` (`vmap`, `grad`, `jacrev`, "
     "`hessian`, `jvp`): functorch cannot see inside it.",
     "Call the kernels from a Python Function in the `setup_context` style, with a `vmap` "
     "and a `jvp` rule.",
     "auto_examples/beyond_python/plot_18_cpp_extension"),
]  # fmt: skip


# Built-ins whose double backward raises: appended, one entry per message.
_BUILTINS_PAGE = "auto_examples/builtins_and_models/plot_14_builtins_without_double_backward"
# cdist's size trap and the table's rows run again (pdist, hardsigmoid, multi_margin_loss).
_CDIST_PAGE = "auto_examples/builtins_and_models/plot_14c_cdist_size_trap"
SCENARIOS += [
    ("Attention's CPU kernel has no double backward", _builtin_sdpa,
     "`F.scaled_dot_product_attention` (and `nn.MultiheadAttention`, "
     "`nn.TransformerEncoderLayer`) ran on the CPU flash kernel, whose backward has no "
     "derivative.",
     "Run attention under `sdpa_kernel(SDPBackend.MATH)`, or call "
     "`double_backward.ops.scaled_dot_product_attention`.",
     _BUILTINS_PAGE),
    *[
        (f"Attention's {kernel} CUDA kernel has no double backward",
         fused_cuda_attention(kernel),
         f"On a GPU, `F.scaled_dot_product_attention` (and `nn.MultiheadAttention`, "
         f"`nn.TransformerEncoderLayer`, Hugging Face transformers' `\"sdpa\"` attention) "
         f"ran the {kernel} kernel, whose backward has no derivative (which of the three "
         "a GPU runs depends on the GPU and its cuDNN version). Raised here on the meta "
         "device, which runs the same derivative formulas without a GPU.",
         CUDA_ATTENTION_FIX, CUDA_PAGE)
        for kernel in FUSED_CUDA_KERNELS
    ],
    ("cdist below 26 rows, or p other than 2", _builtin_cdist,
     "`torch.cdist` with p = 2 when neither input has more than 25 rows (or any other p) "
     "uses a kernel whose backward, `_cdist_backward`, has no derivative.",
     '`compute_mode="use_mm_for_euclid_dist"` for p = 2, or `double_backward.ops.cdist`.',
     _CDIST_PAGE),
    ("pdist has no double backward", _builtin_pdist,
     "`F.pdist`'s backward, `_pdist_backward`, has no derivative.",
     "`double_backward.ops.pdist`.",
     _CDIST_PAGE),
    ("hardsigmoid's backward has no derivative", _builtin_hardsigmoid,
     "`F.hardsigmoid` (and `nn.Hardsigmoid`) under a gradient penalty.",
     "`F.relu6(x + 3) / 6` computes the same function with ops that have a double backward.",
     _CDIST_PAGE),
    ("ctc_loss has no double backward", _builtin_ctc_loss,
     "`F.ctc_loss`'s backward, `_ctc_loss_backward`, has no derivative (pytorch#70108).",
     "No switch in torch: `double_backward.ops.ctc_loss` computes the loss as a log-space "
     "recursion of differentiable ops.",
     _BUILTINS_PAGE),
    ("A loss's backward has no derivative", _builtin_multi_margin_loss,
     "`F.multi_margin_loss` (and `multilabel_margin_loss`): their backward kernels have no "
     "derivative.",
     MULTI_MARGIN_FIX,
     _CDIST_PAGE),
]  # fmt: skip


# title -> [(another cause, a scenario of it)]: other ways to get the same message, each run at
# build time and required to raise the entry's message word for word.
ALSO_RAISED_BY: dict[str, list[tuple[str, Callable[[], None]]]] = {
    "The gradient has no graph": [
        ("a `@once_differentiable` backward whose output is the whole loss "
         "(`y.sum()`, asked with `torch.autograd.grad`): the incoming gradient is a constant, "
         "and the decorator's result has no graph.", _once_differentiable_whole_loss),
    ],
    "The graph misses the input": [
        ("a `@once_differentiable` backward in a composed loss (`y.sin().sum()`, asked "
         "with `torch.autograd.grad`): the incoming gradient depends on `x`, and the "
         "decorator's node leads to it, not to `x`.", _once_differentiable_composed_loss),
    ],
}  # fmt: skip


def other_causes(messages: dict[str, str]) -> dict[str, list[str]]:
    """title -> the other causes' texts, after running each: every one must raise the whole
    message the entry's own scenario raised with the installed torch (``messages``)."""
    found = {}
    for title, causes in ALSO_RAISED_BY.items():
        for cause, scenario in causes:
            message = captured_message(scenario)
            if message != messages[title]:
                raise FixIsWrong(
                    f"error_index: {scenario.__name__} raised {message!r}, not the message of "
                    f"{title!r} ({messages[title]!r})"
                )
            found.setdefault(title, []).append(cause)
    return found


def silent_once_differentiable() -> str:
    """The index's note on the silent case, with the values computed now."""
    second, right = once_differentiable_silent()
    return (
        "Beside another term that reaches `x` (`y.sum() + (x**3).sum()`), nothing is raised, "
        f"and the second derivative lacks the Function's term: {second} where it is {right} "
        "(at x = 0.5, 1, 2; computed at build time)."
    )


def first_line(error: BaseException) -> str:
    """``Type: first line of the message``, as the compatibility matrix and the committed
    files of other releases keep it."""
    return first_line_of(whole_message(error))


def whole_message(error: BaseException) -> str:
    """``Type: the whole message``, every line of it, as the index shows it: what a reader
    pastes into the site's search is the whole message, and search finds a page only when it
    holds every word typed."""
    return f"{type(error).__name__}: {str(error).strip()}"


def first_line_of(message: str) -> str:
    return message.splitlines()[0].rstrip(",")


class RaisedNothing(RuntimeError):
    """A scenario ran without raising: the installed torch no longer prints its message."""


def captured_message(scenario: Callable[[], None]) -> str:
    """The whole ``Type: message`` the scenario raises; fails loudly if it raises nothing."""
    try:
        scenario()
    except Exception as error:  # noqa: BLE001 - any error is what we want to capture
        return whole_message(error)
    raise RaisedNothing(f"error_index: {scenario.__name__} raised no error")


@functools.cache
def measure_whole() -> dict[str, str | None]:
    """Each scenario's title -> its whole message with the installed torch, ``None`` when it
    raised nothing. Run once per process."""
    results: dict[str, str | None] = {}
    for title, scenario, *_ in SCENARIOS:
        try:
            results[title] = captured_message(scenario)
        except RaisedNothing:
            results[title] = None
    return results


def measure() -> dict[str, str | None]:
    """Each scenario's title -> the first line of its message with the installed torch,
    ``None`` when it raised nothing: what ``nox -s matrix`` commits for other releases, and
    what the compatibility matrix looks its messages up by."""
    return {
        title: None if message is None else first_line_of(message)
        for title, message in measure_whole().items()
    }


measure.cache_clear = measure_whole.cache_clear  # type: ignore[attr-defined]


def raised_messages() -> dict[str, str]:
    """Title -> message (first line) of the scenarios the installed torch raises. Unlike
    :func:`captured_messages`, it does not demand that every one raise: torch 2.14.1 has the
    double backward of cdist and pdist, and their scenarios raise nothing there."""
    return {
        title: message for title, message in measure().items() if message is not None
    }


def captured_messages() -> tuple[tuple[str, str], ...]:
    """(title, message) of every scenario with the installed torch; every one must raise."""
    for (title, scenario, *_), message in zip(
        SCENARIOS, measure().values(), strict=True
    ):
        if message is None:
            raise RaisedNothing(
                f"error_index: {scenario.__name__} ({title}) raised no error"
            )
    return tuple(measure().items())


# Wordings older torch releases print, where a public report shows them: (which releases,
# the message). A reader on an old torch pastes these, and search finds the entry.
OLDER_WORDINGS: dict[str, list[tuple[str, str]]] = {
    "Old style under torch.func": [
        ("torch 2.0 and 2.1, whose link named the docs' former master branch",
         "RuntimeError: In order to use an autograd.Function with functorch transforms "
         "(vmap, grad, jvp, jacrev, ...), it must override the setup_context staticmethod. "
         "For more details, please see "
         "https://pytorch.org/docs/master/notes/extending.func.html"),
    ],
    "gradgradcheck finds a mismatch": [
        ("torch before 1.9, which raised a plain RuntimeError (GradcheckError came in 1.9)",
         "RuntimeError: Jacobian mismatch for output 0 with respect to input 0,\n"
         "numerical:tensor(...)\nanalytical:tensor(...)"),
    ],
}  # fmt: skip


def _printed_by(releases: list[str]) -> str:
    return "Printed by torch " + " and ".join(releases) + "."


def _code_cell(message: str | None) -> str:
    """A message inside a Markdown table cell: a code span, its pipes escaped."""
    if message is None:
        return "raised no error"
    return "`` " + message.replace("|", "\\|") + " ``"


def printed(
    title: str, measurements: dict[str, Measurement], whole: str | None = None
) -> str:
    """The message as each torch release printed it: one block when they agree, side by side
    when they differ; the releases that did not measure this scenario are named. ``whole``
    is the installed torch's whole message: the committed files keep first lines only, so a
    release agrees with it when its first line is the same, and the block shows it whole."""
    by_release = {
        tv: m.results[title] for tv, m in measurements.items() if title in m.results
    }
    unmeasured = [tv for tv in measurements if tv not in by_release]
    if len(set(by_release.values())) == 1:
        message = next(iter(by_release.values()))
        if (
            whole is not None
            and message is not None
            and first_line_of(whole) == message
        ):
            message = whole
        text = f"```text\n{message}\n```\n\n{_printed_by(list(by_release))}"
    else:
        header = " | ".join(f"torch {tv}" for tv in by_release)
        cells = " | ".join(_code_cell(message) for message in by_release.values())
        text = (
            "The message differs between torch releases:\n\n"
            f"| {header} |\n" + "|---" * len(by_release) + f"|\n| {cells} |"
        )
        if whole is not None and whole != first_line_of(whole):
            installed = [tv for tv, m in measurements.items() if m.live]
            text += (
                f"\n\nThe whole message, as torch {' and '.join(installed)} prints it:"
                f"\n\n```text\n{whole}\n```"
            )
    if unmeasured:
        text += (
            f" Not measured on torch {' and '.join(unmeasured)} (added since): "
            f"`nox -s matrix -- {unmeasured[0]}`."
        )
    for releases, message in OLDER_WORDINGS.get(title, []):
        text += f"\n\nAs {releases} print it:\n\n```text\n{message}\n```"
    return text


def scope(title: str, measurements: dict[str, Measurement]) -> str:
    """Where some measured release raised nothing: which releases the cause holds for."""
    raised = [tv for tv, m in measurements.items() if m.results.get(title)]
    silent = [tv for tv, m in measurements.items() if title in m.results
              and m.results[title] is None]  # fmt: skip
    if not silent:
        return ""
    return (
        f"In torch {' and '.join(raised)}, not in {' and '.join(silent)}, where the same "
        "call raised no error: "
    )


def table(
    measurements: dict[str, Measurement],
    cuda: dict | None = None,
    whole: dict[str, str | None] | None = None,
    also: dict[str, list[str]] | None = None,
    notes: dict[str, str] | None = None,
) -> str:
    """One section per scenario: the message as each torch release printed it (``whole``:
    the installed torch's whole messages), its causes (``also``: the others found to print
    it), its fix, where explained, a ``notes`` line; then the CUDA kernels' messages from the
    committed ``cuda`` file."""
    whole = whole or {}
    sections = []
    also, notes = also or {}, notes or {}
    for title, _, cause, fix, page in SCENARIOS:
        others = "".join(f"- **Also raised by:** {other}\n" for other in also.get(title, []))
        note = f"- **Note:** {notes[title]}\n" if title in notes else ""
        sections.append(
            f"## {title}\n\n{printed(title, measurements, whole.get(title))}\n\n"
            f"- **Cause:** {scope(title, measurements)}{cause}\n{others}- **Fix:** {fix}\n"
            f"{note}- **Explained in:** {{doc}}`/{page}`\n"
        )
    if cuda:
        raised_here = {message for measurement in measurements.values()
                       for message in measurement.results.values() if message}  # fmt: skip
        sections += cuda_sections(cuda, raised_here)
    return "\n".join(sections)


# Whole CUDA messages whose GPU measurement kept only their start (ending in "…"). Their text
# is in torch's own library (tests/docs_ext/test_error_index.py finds each in it).
CUDA_WHOLE_MESSAGES = (
    "NotImplementedError: the derivative for '_cudnn_rnn_backward' is not implemented. "
    "Double backwards is not supported for CuDNN RNNs due to limitations in the CuDNN API. "
    "To run double backwards, please disable the CuDNN backend temporarily while running "
    "the forward pass of your RNN. For example: \n"
    "with torch.backends.cudnn.flags(enabled=False):\n"
    "    output = model(inputs)",
)


def whole_cuda_message(message: str) -> str:
    """The whole message of a CUDA message recorded cut short, or the message as it is."""
    if message.endswith("…"):
        for whole in CUDA_WHOLE_MESSAGES:
            if whole.startswith(message.removesuffix("…")):
                return whole
    return message


def cuda_title(message: str) -> str:
    """A CUDA message's section title: the operator it names, or its words."""
    import re

    match = re.search(r"aten::(\w+)|derivative for '(\w+)'", message)
    if match:
        operator = (match.group(1) or match.group(2)).removesuffix("_backward")
        return f"On CUDA: {operator} has no double backward"
    return "On CUDA: " + message.split(": ")[-1].rstrip(".…")


def cuda_sections(cuda: dict, raised_here: set[str] = frozenset()) -> list[str]:
    """The CUDA column of the index: each message measured on a GPU, labelled with the GPU,
    torch build and date it came from; none that a scenario raised at build time
    (``raised_here``: the fused attention kernels, on the meta device), which has its entry."""
    from double_backward.checker.model import FIXES

    sections = []
    trials = cuda_results.by_op(cuda)
    for message, where in cuda_results.error_entries(cuda):
        # A result without a recorded message; a message a scenario's entry already shows.
        if message.startswith("raises (") or message in raised_here:
            continue
        ops = [op for op in trials if any(e == message for *_, e in trials[op])]
        fix = cuda_results.fix(ops[0], [("", "", message)], FIXES, "none known")
        sections.append(
            f"## {cuda_title(message)}\n\n```text\n{whole_cuda_message(message)}\n```\n\n"
            f"Measured on CUDA, not at build time: {cuda_results.label(cuda)} "
            f"({cuda['source']})\n\n"
            f"- **Cause:** a gradient penalty through {where}.\n- **Fix:** {fix}\n"
            f"- **Explained in:** {{doc}}`/{CUDA_PAGE}`\n"
        )
    return sections


def _write_table(app: Sphinx) -> None:
    # Raising the errors imports torch (seconds): redo it only when torch, the code or a
    # committed measurement changed.
    path = Path(app.srcdir) / "_generated" / "error_messages.md"
    key = digest(  # torch, the package, this file, the committed messages
        Path(__file__),
        Path(__file__).with_name("versioned_results.py"),
        *committed_files("error_index"),
        Path(__file__).with_name("cuda_results.py"),
        *sorted(cuda_results.DATA_DIR.glob("*.json")),
        salt=version("torch"),
    )

    def make() -> str:
        captured_messages()  # every scenario must raise here
        messages = {title: m for title, m in measure_whole().items() if m is not None}
        check_multi_margin_fix()  # the fix printed computes the loss it replaces
        committed_cuda = cuda_results.load()
        cuda = committed_cuda[-1] if committed_cuda else None
        notes = {"Marked once differentiable": silent_once_differentiable(),
                 "Attention's CPU kernel has no double backward": sdpa_condition()}  # fmt: skip
        return table(by_version("error_index", measure()), cuda, measure_whole(),
                     other_causes(messages), notes)  # fmt: skip

    regenerate(path, key, make)


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("builder-inited", _write_table)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
