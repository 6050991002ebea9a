r"""
When a built-in has no double backward
======================================

Most double-backward failures readers meet are not in a Function they wrote: they are in a
built-in inside the model they already have. On the CPU, ``F.scaled_dot_product_attention``
runs a kernel whose backward cannot be differentiated, so a gradient penalty through attention
raises (through ``nn.TransformerEncoderLayer`` too, in eval mode or trained without dropout);
``torch.cdist`` raises in torch 2.13 for p = 2 when neither input has more than 25 rows, and
for any other p (2.14.1 has its double backward). This
page runs an R1 gradient penalty on a small transformer discriminator, sees it fail, lets
:func:`double_backward.check_model` name the layer, and fixes it twice: with torch's MATH
backend, and with ``double_backward.ops.scaled_dot_product_attention``, a custom Function
built the way the earlier pages teach. Then cdist's size trap, and the table of every
built-in that raises.
"""

# %%
# A transformer discriminator
# ---------------------------
# Two pre-norm blocks as timm's ViT writes them: one ``qkv`` projection, then one fused
# attention call, passed in as ``attention`` so that it can be swapped. The discriminator scores
# a batch of 8 sequences of 16 tokens; its weights are seeded, so every build sees the same.
import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, attention, dim=32, heads=4):
        super().__init__()
        self.attention, self.heads = attention, heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        batch, length, dim = x.shape
        qkv = self.qkv(x).reshape(batch, length, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, length, dim / heads)
        out = self.attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))


# %%
# The blocks and the score: one number per sequence, as a GAN's critic gives.
class Block(nn.Module):
    def __init__(self, attention, dim=32):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(attention, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Discriminator(nn.Module):
    def __init__(self, attention=F.scaled_dot_product_attention, dim=32):
        super().__init__()
        self.blocks = nn.Sequential(Block(attention, dim), Block(attention, dim))
        self.score = nn.Linear(dim, 1)

    def forward(self, x):
        return self.score(self.blocks(x).mean(dim=1)).squeeze(-1)


torch.manual_seed(0)
discriminator = Discriminator()
real = torch.randn(8, 16, 32)
print(f"scores of the real batch: {discriminator(real).detach().numpy().round(3)}")

# %%
# The R1 penalty fails
# --------------------
# R1 (Mescheder et al., 2018) penalises the squared norm of the discriminator's gradient at
# real samples. Training differentiates that penalty with respect to the weights: a second
# backward through the gradient. The first backward works; the second raises.


def r1_penalty(model, x, gamma=10.0):
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    return gamma / 2 * grad_x.pow(2).sum(dim=(1, 2)).mean()


try:
    r1_penalty(discriminator, real).backward()
except RuntimeError as error:
    print(f"R1 penalty, backward: {type(error).__name__}: {error}")

# %%
# ``check_model`` names the layer
# -------------------------------
# :func:`double_backward.check_model` runs R1's penalty by default (``wrt="inputs"``: the
# gradient with respect to the input with ``create_graph=True``, its squared norm, then the
# backward to the input and the parameters; ``wrt="parameters"`` runs MAML's, the default for
# token ids, and ``wrt="embeddings"`` differentiates a text model's embeddings), on a copy of
# the model, with a random weighting of the outputs. The report names the penalty it ran. An
# error there is a break; to say where, it checks each submodule alone on the arguments it
# was called with (buffers restored, the same random numbers, masks and caches as they were)
# and reports the innermost ones that break, by their path in ``named_modules()``, with the op
# and the fix. Then, in a float64 copy, it compares the penalty's second derivative with
# central differences of the gradient along random directions (step chosen per direction, kink
# crossings refused), which finds breaks that raise nothing. What it covers: that penalty, at
# these inputs, along the directions it reports; a direction through a ReLU exactly at 0 cannot
# decide, and when none decides the report says "could not decide", never ok.
from double_backward import check_model

print(check_model(discriminator, real))

# %%
# Fix 1: the MATH backend
# -----------------------
# ``torch.nn.attention.sdpa_kernel`` chooses the kernel. MATH computes attention from
# ordinary ops (matmul, softmax, matmul), each with its own double backward, so the penalty
# works.
from torch.nn.attention import SDPBackend, sdpa_kernel

discriminator.zero_grad()  # the failed backward may have accumulated some gradients
with sdpa_kernel(SDPBackend.MATH):
    penalty = r1_penalty(discriminator, real)
    penalty.backward()
weight = discriminator.blocks[0].attn.qkv.weight
print(f"R1 penalty under MATH: {penalty.item():.4f}; its gradient reached the weights: "
      f"{weight.grad is not None}")


def weight_gradients(model):
    # The score's bias gets none: the input gradient does not depend on it.
    return [
        torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()
    ]


math_grads = weight_gradients(discriminator)

# %%
# What MATH keeps for backward
# ----------------------------
# The price: MATH keeps the attention matrix for backward, L x L per head. Counted exactly
# with :func:`double_backward.costs.saved_tensors`, on one self-attention call at B=2, H=8,
# L=1024, d=64 whose query, key and value are the input: an *extra* tensor is one kept only for
# backward.
from double_backward.costs import saved_tensors


def self_attention_under_math(t):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(t, t, t)


x = torch.randn(2, 8, 1024, 64)
for kept in saved_tensors(self_attention_under_math, x).forward:
    print(f"{kept.role:7} {str(tuple(kept.shape)):20} {kept.nbytes:>12,} bytes")

# %%
# Fix 2: a custom Function that saves O(L·d)
# ------------------------------------------
# ``double_backward.ops.scaled_dot_product_attention`` has the arguments and the result of
# ``F.scaled_dot_product_attention``. Its forward saves q, k, v, the output and one logsumexp
# per query, returned as an extra output as ``Sinh`` returns its intermediates
# (:doc:`plot_03_saving_intermediates`); its backward recomputes the attention matrix with
# differentiable ops. Here is what it keeps, on the same calls.
from double_backward import ops


def self_attention_with_ops(t):
    return ops.scaled_dot_product_attention(t, t, t)


print(f"{'L':>5} {'MATH extra bytes':>17} {'ops extra bytes':>16} {'ratio':>7}")
for length in (256, 1024):
    x = torch.randn(2, 8, length, 64)
    math_bytes = saved_tensors(self_attention_under_math, x).extra_bytes
    ops_bytes = saved_tensors(self_attention_with_ops, x).extra_bytes
    print(
        f"{length:>5} {math_bytes:>17,} {ops_bytes:>16,} {math_bytes / ops_bytes:>7.0f}"
    )

# %%
# The penalty with the custom Function
# ------------------------------------
# The same discriminator, same weights, with the custom attention passed in. The penalty
# runs, and its gradient with respect to every weight agrees with MATH's.
fixed = Discriminator(attention=ops.scaled_dot_product_attention)
fixed.load_state_dict(discriminator.state_dict())
r1_penalty(fixed, real).backward()
difference = max(
    (g - m).abs().max().item()
    for g, m in zip(weight_gradients(fixed), math_grads, strict=True)
)
# float32 rounding differs between the two (the custom Function works in blocks of queries).
print(f"weight gradients agree with MATH's to 1e-6: {difference < 1e-6}")
print(check_model(fixed, real))

# %%
# What it costs in time
# ---------------------
# Bytes are counted above, live; times are not taken here, since a build machine's timings
# are noise. They come from ``nox -s bench_functions``, committed with the package: the custom
# Function against MATH at B=2, H=8, L=S=1024, d=64, float32, one thread, the median of paired
# rounds (ratio above 1: the custom Function is slower). :doc:`plot_20_costs` shows the rest.
from double_backward.costs import load_measurements

attention = load_measurements("attention")
machine, settings = attention["machine"], attention["settings"]
print(f"measured {attention['date']} on {machine['cpu']}, {machine['cores']} cores, "
      f"torch {machine['torch']}, {settings['threads']} thread, "
      f"{settings['rounds']} rounds")
print(f"load average {machine['load_average_start'][0]} at start, "
      f"{machine['load_average_end'][0]} at end (shared machine)")
for kind, label in [("forward_backward", "forward + backward"),
                    ("gradient_penalty", "gradient penalty")]:
    timing = attention["times"][kind]
    print(f"{label:19} ops / MATH time: {timing['ratio']:.2f} "
          f"(quartiles {timing['ratio_q1']:.2f} to {timing['ratio_q3']:.2f})")

# %%
# cdist's size trap
# -----------------
# ``torch.cdist`` with p = 2 switches kernel by size: when either input has more than 25
# rows it computes distances through a matrix product, whose double backward exists;
# otherwise, and for every other p, a direct kernel whose backward ``_cdist_backward`` has
# none. A penalty that passes at batch 32 fails at batch 16. That is torch 2.13, which builds
# this page; torch 2.14.1 differentiates ``_cdist_backward``, and the penalty runs at every
# size (:doc:`/builtins` lists the sizes tried and compares the releases' scans).


def metric_penalty(batch, **kwargs):
    torch.manual_seed(0)
    embed = nn.Linear(8, 4)
    x = torch.randn(batch, 8, requires_grad=True)
    z = embed(x)
    distances = torch.cdist(z, z.roll(1, dims=0), **kwargs)
    (grad_x,) = torch.autograd.grad(distances.sum(), x, create_graph=True)
    grad_x.pow(2).sum().backward()


for batch in (32, 16):
    try:
        metric_penalty(batch)
        print(f"batch {batch}: penalty backward ran")
    except NotImplementedError as error:
        print(f"batch {batch}: {type(error).__name__}: {error}")

# %%
# The cdist fixes
# ---------------
# For p = 2, ``compute_mode="use_mm_for_euclid_dist"`` makes cdist take the matrix-product
# route at every size. For every p torch's cdist takes (p >= 0, or infinity),
# ``double_backward.ops.cdist`` differentiates to every order; below p = 1 it is not a norm
# (p = 0 counts the coordinates that differ, and its derivatives are all 0).
metric_penalty(16, compute_mode="use_mm_for_euclid_dist")
print('batch 16, compute_mode="use_mm_for_euclid_dist": penalty backward ran')
torch.manual_seed(0)
points = torch.randn(16, 4, requires_grad=True)
for p in (0.5, 1.0, 1.5, 2.0, 3.0, math.inf):
    (grad_points,) = torch.autograd.grad(
        ops.cdist(points, points.roll(1, dims=0), p=p).sum(), points, create_graph=True
    )
    grad_points.pow(2).sum().backward()
    print(f"batch 16, ops.cdist with p = {p}: penalty backward ran")
# p = 0 is a count, constant wherever it is differentiable: its gradient is exactly 0, with no
# graph behind it (as torch.round's), so every higher derivative is 0 too.
(grad_points,) = torch.autograd.grad(
    ops.cdist(points, points.roll(1, dims=0), p=0.0).sum(), points, create_graph=True
)
print(f"batch 16, ops.cdist with p = 0: gradient all zero: {bool(grad_points.eq(0).all())}, "
      f"has a graph: {grad_points.requires_grad}")

# %%
# The table
# ---------
# These two are not alone. :doc:`/builtins` lists every built-in whose double backward raises
# in each tested torch release, found by running a gradient penalty through each op of torch's
# OpInfo database, in float64 and float32, with the condition and the fix for each. A few of
# its rows, run again here:
import torch.nn.functional as F

rows = {
    "F.pdist": lambda t: F.pdist(t),
    "F.hardsigmoid": lambda t: F.hardsigmoid(t) ** 2,
    "F.multi_margin_loss": lambda t: F.multi_margin_loss(
        t, torch.tensor([0, 1, 2, 3, 0])
    ),
}
for name, fn in rows.items():
    t = torch.randn(5, 4, requires_grad=True)
    (grad_t,) = torch.autograd.grad(fn(t).sum(), t, create_graph=True)
    try:
        grad_t.pow(2).sum().backward()
        print(f"{name:22} penalty backward ran")
    except (RuntimeError, NotImplementedError) as error:
        print(f"{name:22} {type(error).__name__}: {error}")

# %%
# Conclusion
# ----------
# A built-in without a double backward fails the way a custom Function does: its backward
# leaves autograd. Find it with ``check_model`` (it names the submodule, the op and the fix),
# switch the backend where torch has one that works, and otherwise replace the op by a custom
# Function whose backward is built from differentiable operations, as in
# :doc:`plot_03_saving_intermediates` and :doc:`plot_04_untracked_backward`. Next: the
# gradient penalty and other uses in :doc:`plot_15_applications`; the errors by message in
# :doc:`/errors`.
