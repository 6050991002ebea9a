r"""
On the GPU
==========

Gradient penalties, MAML and physics-informed networks train on GPUs, and on CUDA some
built-ins run kernels that the CPU never runs: fused attention (flash, memory-efficient, cuDNN)
and cuDNN's RNNs. None of the three attention kernels has a double backward, and cuDNN's RNNs
raised in a gradient penalty in a reported run on an NVIDIA H200 (torch 2.11). This page shows
which kernels change on CUDA, the fix for each, what the replacement attention costs on a GPU,
and the one line that swaps the replacements into a model you did not write:
``with double_backward.ops.replaced():``.

This site is built on a CPU. The attention kernels' missing derivatives are shown here on the
meta device, which needs no GPU. What a GPU measured comes with the package, labelled with the
GPU, the torch build and the date; nothing here re-runs it. The context manager runs live, on
the CPU, on a transformer and an LSTM; the same code runs on CUDA unchanged.
"""

# %%
# Which kernels change on CUDA
# ----------------------------
# A gradient penalty (``torch.autograd.grad`` with ``create_graph=True``, then a second
# backward) through each probe, on a GPU. The results come with the package, one run per torch
# release, each cell what that run raised, word for word. Nothing here runs on a GPU, and a cell
# no run produced is not shown.
# sphinx_gallery_thumbnail_number = 1
import textwrap
from importlib.metadata import requires

from double_backward.costs import load_cuda_measurements

runs = load_cuda_measurements()
floor = next(r for r in requires("double_backward") if r.replace(" ", "").startswith("torch"))
probed = [data for data in runs if data["results"]]
if not probed:
    print("No GPU run of the probes is recorded yet.")
    print(f"newest run: torch {runs[-1]['torch']}; this package requires {floor}")
    print(textwrap.fill(runs[-1]["source"], width=80))
for data in probed[-1:]:
    env = data["environment"]
    print(f"measured on {data['device']} (compute capability {env['compute_capability']}), "
          f"torch {data['torch_build']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
          f"{data['measured']}; this package requires {floor}\n")
    by_op = {}
    for cell, error in data["results"].items():
        op, condition, dtype = cell.split(" | ")
        if data["stages"].get(cell) == "forward":
            error = f"refused at the forward (not a double-backward result): {error}"
        by_op.setdefault(op, {}).setdefault(error or "passes", []).append(f"{condition} ({dtype})")
    for op, outcomes in by_op.items():
        print(op)
        for outcome, where in outcomes.items():
            print(f"  {outcome}\n    {'; '.join(where)}")
    print("\nthe default kernel, as autograd recorded it:")
    for cell, kernel in data["kernels"].items():
        if "default CUDA kernel" in cell and cell.startswith("nn.functional"):
            print(f"  {cell.split(' | ')[2]}: {kernel}")

# %%
# Without a GPU: the fused kernels on the meta device
# ----------------------------------------------------
# Whether a kernel has a double backward depends on its derivative formula, which is the same
# on every device. Tensors on the ``meta`` device have shapes and no data, so the CPU can run
# the autograd of the CUDA kernels: here a penalty through each fused kernel, called by its
# ATen name, on the torch this page was built with. The MATH backend is the control.
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

aten = torch.ops.aten


def penalty_on_meta(attention):
    """What a penalty's second backward through ``attention`` does, on meta tensors."""
    q, k, v = [torch.empty(1, 2, 8, 16, device="meta", requires_grad=True)
               for _ in range(3)]
    (grad_q,) = torch.autograd.grad(attention(q, k, v).sum(), q, create_graph=True)
    try:
        torch.autograd.grad(grad_q.sum(), q)
    except RuntimeError as error:
        return f"{type(error).__name__}: {error}"
    return "the penalty runs"


# The fused kernels by their ATen names; each returns its output first.
def flash(q, k, v):
    return aten._scaled_dot_product_flash_attention(q, k, v)[0]


def memory_efficient(q, k, v):
    return aten._scaled_dot_product_efficient_attention(
        q, k, v, attn_bias=None, compute_log_sumexp=True)[0]


def cudnn(q, k, v):
    return aten._scaled_dot_product_cudnn_attention(
        q, k, v, attn_bias=None, compute_log_sumexp=True)[0]


print(f"torch {torch.__version__}, meta device")
for kernel in (flash, memory_efficient, cudnn):
    outcome = penalty_on_meta(kernel)
    print(f"{kernel.__name__}:\n{textwrap.indent(textwrap.fill(outcome, 76), '  ')}")
    if "is not implemented" not in outcome:  # a release that adds the derivative
        raise RuntimeError(f"{kernel.__name__}'s penalty no longer raises: {outcome}")
with sdpa_kernel(SDPBackend.MATH):
    print(f"math:\n  {penalty_on_meta(F.scaled_dot_product_attention)}")

# %%
# Why a run records its kernels
# ------------------------------
# On CUDA, ``F.scaled_dot_product_attention`` runs one of the three fused kernels whenever its
# inputs allow, so whichever one a GPU picks, the penalty raises; MATH runs when asked for, or
# when none of the three takes the inputs.
# The dtype alone does not fix which kernel the default picks. torch chooses among the fused
# kernels by the GPU's generation and the cuDNN version, so a run records its choice (the
# autograd node of the output) beside those versions. The runs come from the torch release
# printed above, which can be older than the floor the package requires.

# %%
# The fixes, one per kernel
# -------------------------
# Attention: run it under ``sdpa_kernel(SDPBackend.MATH)``, which keeps the L × S attention
# matrix, or call :func:`double_backward.ops.scaled_dot_product_attention`. An RNN: run its
# forward under ``torch.backends.cudnn.flags(enabled=False)``, which makes it take the native
# CUDA kernels. :func:`~double_backward.check_model` names these kernels when it finds them in a
# model.

# %%
# A model with both: the gradient penalty without the fix
# -------------------------------------------------------
# A transformer encoder (eval mode, no dropout) and an LSTM, on the GPU when there is one. On
# the CPU the transformer's attention runs torch's CPU flash kernel, which has no double
# backward either, so the penalty fails here too; the LSTM works on the CPU.
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}")


def gradient_penalty(model, x):
    """loss + |d loss / dx|², differentiated with respect to the weights."""
    x = x.detach().requires_grad_()
    loss = model(x).square().mean()
    (grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
    total = loss + grad_x.square().sum()
    total.backward()
    return total.detach()


torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).double().to(device).eval()
x = torch.randn(4, 10, 32, dtype=torch.float64, device=device)
try:
    gradient_penalty(encoder, x)
except RuntimeError as error:
    print(f"TransformerEncoder: {type(error).__name__}: {str(error).splitlines()[0]}")

# %%
# One line: ``ops.replaced()``
# ----------------------------
# Inside the block, ``F.scaled_dot_product_attention``, ``torch.cdist``, ``F.pdist`` and
# ``F.ctc_loss`` are the replacements of :mod:`double_backward.ops`, and the forward of
# ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU`` runs with cuDNN off (cuDNN stays on for the rest,
# such as convolutions). ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` look the
# attention function up in ``torch.nn.functional`` at each call, and so does Hugging Face
# transformers' ``"sdpa"`` attention, so they pick the replacement up. The penalty now runs,
# and its value is the MATH backend's.
from double_backward import ops

encoder.zero_grad()
with ops.replaced():
    replaced_value = gradient_penalty(encoder, x)
replaced_grads = [p.grad.clone() for p in encoder.parameters()]
encoder.zero_grad()
with sdpa_kernel(SDPBackend.MATH):
    math_value = gradient_penalty(encoder, x)
same = torch.allclose(replaced_value, math_value, rtol=1e-10, atol=0) and all(
    torch.allclose(a, p.grad, rtol=1e-9, atol=1e-12)
    for a, p in zip(replaced_grads, encoder.parameters(), strict=True)
)
print(f"TransformerEncoder under ops.replaced(): penalty ran; "
      f"value and weight gradients equal MATH's (float64, rtol 1e-9): {same}")

# %%
# The LSTM, in the same block
# ---------------------------
# The LSTM's penalty runs on both devices with the block: on CUDA because its forward runs
# with cuDNN off, on the CPU because the CPU kernels have a double backward anyway. The block
# restores what it replaced when it ends, also when it raises, and blocks nest.
torch.manual_seed(0)
lstm = nn.LSTM(8, 16, batch_first=True).double().to(device)


def last_hidden(x):
    return lstm(x)[0][:, -1]


sequence = torch.randn(3, 12, 8, dtype=torch.float64, device=device)
with ops.replaced():
    value = gradient_penalty(last_hidden, sequence)
    print(f"inside:  F.scaled_dot_product_attention is ops' one: "
          f"{F.scaled_dot_product_attention is ops.scaled_dot_product_attention}")
print(f"LSTM under ops.replaced(): penalty ran, value {value.item():.6f}")
print(f"after:   F.scaled_dot_product_attention is ops' one: "
      f"{F.scaled_dot_product_attention is ops.scaled_dot_product_attention}")

# %%
# What it does not patch
# ----------------------
# It replaces attributes of ``torch`` and ``torch.nn.functional``, so code that bound the
# function before the block keeps torch's: ``from torch.nn.functional import
# scaled_dot_product_attention`` at the top of a module, or a model compiled or traced before.
# Neither does it change the options the replacements refuse: attention's ``dropout_p`` > 0
# raises a ``ValueError`` inside the block (use dropout 0 or ``model.eval()``). Bound early,
# the torch function still fails the penalty:
from torch.nn.functional import scaled_dot_product_attention as bound_early

q = torch.randn(1, 2, 8, 8, device=device, requires_grad=True)
with ops.replaced():
    print(f"bound early is the replacement: "
          f"{bound_early is F.scaled_dot_product_attention}")
    out = bound_early(q, q, q)
(grad_q,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
try:
    grad_q.sum().backward()
except RuntimeError as error:
    print(f"bound early: {type(error).__name__}: {str(error).splitlines()[0]}")

# %%
# What the replacement attention costs on a GPU
# ---------------------------------------------
# :func:`~double_backward.ops.scaled_dot_product_attention` keeps one logsumexp per query
# instead of the L × S attention matrix, and computes the scores a block of queries at a time.
# Blocks of 2\ :sup:`20` scores, tuned on a CPU, left a GPU idle between small kernels. Blocks of
# 2\ :sup:`27` met the targets against MATH in bfloat16: penalty time at most 0.7×, penalty
# peak memory at most 0.3×, forward + backward at most 0.6×.

# %%
# Measured before two changes
# ---------------------------
# The block size is now chosen per device (:func:`~double_backward.ops.block_elements`:
# 2\ :sup:`27` on CUDA, fewer where a quarter of the free memory cannot hold three blocks).
# Half-precision inputs now keep their scores, softmax statistics and sums in float32, as fused
# kernels do. The figures below were measured before both changes.
#
# The figures, from the newest run that has them:
newest = [data for data in runs if "attention_cost" in data][-1]
print(textwrap.fill(newest["source"], width=80))
cost = newest["attention_cost"]
shape = cost["shape"]
print(f"B={shape['batch']}, H={shape['heads']}, L={shape['length']}, d={shape['features']}, "
      f"{newest['device']}, torch {newest['torch_build']}, {newest['measured']} "
      f"(this package requires {floor})")
print(f"{'dtype':<10}{'kernel':<24}{'fwd+bwd':>10}{'penalty':>10}")
for row in cost["rows"]:
    penalty = row["gradient_penalty_ms"]
    print(f"{row['dtype']:<10}{row['kernel']:<24}{row['forward_backward_ms']:>7g} ms"
          + (f"{penalty:>7g} ms" if penalty is not None else f"{'raises':>10}"))
# Peak memory was measured for some rows only; the others are not shown.
for row in cost["rows"]:
    if row["penalty_peak_gb"] is not None:
        print(f"penalty peak memory, {row['dtype']}, {row['kernel']}: "
              f"{row['penalty_peak_gb']:g} GB")
for row in cost["output_error_vs_float32"]:
    print(f"output error against float32, {row['dtype']}, {row['kernel']}: "
          f"{row['max_abs_error']}")
print(cost["note"])

# %%
# The gradient penalty's time, drawn
# ----------------------------------
# The rows above whose penalty ran, on a log scale: the default kernel raises, and is left out.
import matplotlib.pyplot as plt

ran = [row for row in cost["rows"] if row["gradient_penalty_ms"] is not None]
figure, axes = plt.subplots(figsize=(6, 0.4 * len(ran) + 1), layout="constrained")
axes.barh([f"{row['kernel']}, {row['dtype']}" for row in ran],
          [row["gradient_penalty_ms"] for row in ran])
axes.invert_yaxis()
axes.set(xscale="log", xlabel=f"gradient penalty, ms ({newest['device']})")
plt.show()

# %%
# On this CPU the block is the one tuned here:
print(f"blocked loops on {device}: {ops.block_elements(device)} scores at a time")

# %%
# Conclusion
# ----------
# On CUDA, attention and RNNs take kernels without a double backward; a gradient penalty
# through them raises. The fix is a backend switch (MATH attention, cuDNN off for RNNs) or the
# replacements of :mod:`double_backward.ops`, and ``with double_backward.ops.replaced():``
# applies them to a model as it is. To find which layer of your own model breaks, run
# :func:`~double_backward.check_model` on it (see
# :doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward`);
# :doc:`/errors` lists the CUDA messages with
# their fixes.
