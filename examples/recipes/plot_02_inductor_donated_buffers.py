r"""
torch.compile's default backend and ``create_graph=True``
=========================================================

With ``torch.compile``'s default backend, inductor, a training loop that adds a gradient
penalty to some of its steps can stop with ``This backward function was compiled with
non-empty donated buffers which requires create_graph=False and retain_graph=False``. This
page raises it, shows the switch the message names, and what that switch does and does not
buy: a compiled backward is never differentiated again.
"""

# %%
# The error
# ---------
# Inductor compiles the backward the first time it runs. When that first run is a plain
# ``backward()`` (a training step without the penalty), the compiled backward frees the
# tensors forward saved for it as soon as it has used them ("donated buffers"). A later
# backward with ``create_graph=True`` through the same compiled code needs them kept, and is
# refused. The compile caches are turned off so that every build compiles afresh.
import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config

from double_backward.graph import autograd_graph

inductor_config.fx_graph_cache = False
functorch_config.enable_autograd_cache = False

torch.manual_seed(0)
critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x = torch.randn(3, 4, requires_grad=True)


def penalty_step(model):
    """A gradient penalty: the input gradient, with a graph, then its square's backward."""
    (grad_x,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    penalty = grad_x.pow(2).sum()
    penalty.backward()
    return penalty


compiled = torch.compile(critic)  # the default backend: inductor
compiled(x).sum().backward()  # a plain step compiles the backward
try:
    penalty_step(compiled)
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# The switch, and the next error
# ------------------------------
# ``torch._functorch.config.donated_buffer = False``, set before compiling, keeps the saved
# tensors. The first derivative then comes with a graph, but differentiating it again goes
# through the compiled backward, which has no backward of its own:
functorch_config.donated_buffer = False
torch._dynamo.reset()  # compile again, with the switch
compiled = torch.compile(critic)
compiled(x).sum().backward()
(grad_x,) = torch.autograd.grad(compiled(x).sum(), x, create_graph=True)
print(f"grad_x has a graph: {grad_x.grad_fn is not None}")
grad_x_graph = autograd_graph(  # drawn on the page
    {"grad_x": grad_x},
    {"x": x},
    title="Graph of grad_x through the compiled critic",
)
try:
    grad_x.pow(2).sum().backward()
except RuntimeError as error:
    print(f"RuntimeError: {error}")

# %%
# What works: compile the plain steps, run the penalty eagerly
# ------------------------------------------------------------
# The compiled module keeps the original as ``_orig_mod``, with the same parameters. Plain
# steps go through ``compiled``; the penalty step calls the eager module, whose backward is
# made of differentiable ops. Its gradients are those of the same penalty written without
# any compile, on a copy of the critic:
import copy

reference = copy.deepcopy(critic)
for module in (critic, reference):
    module.zero_grad()
penalty = penalty_step(compiled._orig_mod)
expected = penalty_step(reference)
# (The last bias does not reach grad_x: its gradient stays None in both.)
same = all(
    (p.grad is None and q.grad is None) or torch.allclose(p.grad, q.grad)
    for p, q in zip(critic.parameters(), reference.parameters(), strict=True)
)
print(f"penalty {penalty.item():.6f} (eager copy: {expected.item():.6f}); same grads: {same}")

# %%
# Conclusion
# ----------
# The donated-buffers error says the backward was compiled for one use. The switch it names
# removes that error and reveals the real limit: AOTAutograd compiles first-order backward
# only (:doc:`/auto_examples/beyond_python/plot_19_torch_compile`). Compile what is differentiated
# once and
# run what is differentiated twice in eager mode. Both messages are in the :doc:`/errors`.
#
# Next: :doc:`plot_03_third_party_once_differentiable`, when the op that stops you is a
# library's.
