r"""
When a built-in has no double backward
======================================

Most double-backward failures readers meet are not in a Function they wrote: they are in a
built-in inside the model they already have. On the CPU, ``F.scaled_dot_product_attention``
runs a kernel whose backward cannot be differentiated, so a gradient penalty through attention
raises. This page runs an R1 gradient penalty on a small transformer discriminator, sees it
fail, lets :func:`double_backward.check_model` name the layer, and fixes it twice.

The first fix is torch's MATH backend; the second is
``double_backward.ops.scaled_dot_product_attention``, a custom Function built the way the earlier
pages teach. What each fix keeps for backward is
on :doc:`/auto_examples/builtins_and_models/plot_14b_attention_memory`; ``torch.cdist``'s trap
of the same kind, on
:doc:`/auto_examples/builtins_and_models/plot_14c_cdist_size_trap`.
"""

# %%
# A transformer discriminator
# ---------------------------
# Two pre-norm blocks as timm's ViT writes them: one ``qkv`` projection, then one fused
# attention call, passed in as ``attention`` so that it can be swapped. The discriminator scores
# a batch of 8 sequences of 16 tokens; its weights are seeded, so every build sees the same.

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
# :func:`double_backward.check_model` runs R1's penalty on a copy of the model (``wrt="inputs"``,
# the default; ``wrt="parameters"`` runs MAML's). When the penalty raises, it checks each
# submodule alone on the arguments it was called with. It reports the innermost ones that
# break, by their path in ``named_modules()``, with the op and the fix.
from double_backward import check_model

print(check_model(discriminator, real))

# %%
# Breaks that raise nothing
# -------------------------
# In a float64 copy, ``check_model`` also compares the penalty's second derivative with central
# differences of the gradient along random directions. That finds breaks that raise no error.
# It covers that penalty, at these inputs, along the directions it reports; when no direction
# can decide (a ReLU exactly at 0), the report says "could not decide", never ok.

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
# Fix 2: a custom Function
# ------------------------
# ``double_backward.ops.scaled_dot_product_attention`` has the arguments and the result of
# ``F.scaled_dot_product_attention``. Its forward saves q, k, v, the output and one logsumexp
# per query, returned as an extra output as ``Sinh`` returns its intermediates
# (:doc:`/auto_examples/tutorial/plot_03_saving_intermediates`). Its backward recomputes the
# attention matrix with
# differentiable ops. The same discriminator, same weights, with the custom attention passed
# in: the penalty runs, and its gradient with respect to every weight agrees with MATH's.
from double_backward import ops

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
# The two fixes, drawn
# --------------------
# The norm of each weight's gradient under the penalty, MATH against the custom Function. The
# points lie on the diagonal. (The score's bias gets no gradient and is left out.)
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
pairs = [(m.norm().item(), g.norm().item())
         for m, g in zip(math_grads, weight_gradients(fixed), strict=True) if m.norm() > 0]
norms_math, norms_ops = zip(*pairs, strict=True)
figure, axes = plt.subplots(figsize=(4, 4), layout="constrained")
axes.loglog(norms_math, norms_ops, "o", markersize=4)
low, high = min(*norms_math, *norms_ops) / 2, max(*norms_math, *norms_ops) * 2
axes.plot([low, high], [low, high], color="gray", linewidth=0.8)
axes.set(xlabel="gradient norm, MATH", ylabel="gradient norm, ops",
         title="R1 penalty, every weight")
plt.show()

# %%
# Next
# ----
# A built-in without a double backward fails the way a custom Function does: its backward
# leaves autograd. Find it with ``check_model``, switch the backend where torch has one that
# works, and otherwise replace the op by a custom Function. What each fix keeps for backward:
# :doc:`/auto_examples/builtins_and_models/plot_14b_attention_memory`.
