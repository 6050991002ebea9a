r"""Replacements for built-ins that have no double backward, differentiable to every order.

Each replaces a torch op whose backward raises when differentiated (measured on torch 2.13 CPU)
and keeps its signature and semantics; what it does not support is refused with a clear error.
They follow the model of StyleGAN2-ADA's ``conv2d_gradfix``: a custom Function whose backward
is built from differentiable operations, using only tensors autograd tracks (the inputs, and
outputs of the Function itself, as :class:`~double_backward.Sinh` returns its intermediates),
so the graph of the backward is itself differentiable, and so on to every order.

- :func:`scaled_dot_product_attention` for ``F.scaled_dot_product_attention``, whose default
  CPU kernel (flash attention) has no double backward; it saves :math:`O(L d)`, not the
  :math:`L \times S` attention matrix the MATH backend keeps;
- :func:`cdist` and :func:`pdist` for ``torch.cdist`` (no double backward for p = 2 when
  neither input has more than 25 rows, or for p ≠ 2) and ``F.pdist``;
- :func:`ctc_loss` for ``F.ctc_loss``, whose native backward has no derivative (cuDNN's
  kernel is CUDA only): a log-space recursion of differentiable ops (no custom Function), so
  autograd gives every order;
- :func:`replaced`, a context manager inside which the torch functions resolve to these (and
  cuDNN is off for RNNs), for a model you did not write.

One module per family: ``ops.attention``, ``ops.distances``, ``ops.ctc`` and ``ops.patching``;
every name is reachable as ``double_backward.ops.<name>``. Every tensor an op makes is made on
the device of an input (and in its dtype where it holds values), so the ops run on CUDA, and
on the ``meta`` device, as they do on the CPU.
"""

from __future__ import annotations

from .attention import (
    ScaledDotProductAttention,
    block_elements,
    scaled_dot_product_attention,
)
from .ctc import ctc_loss
from .distances import Cdist, cdist, pdist
from .patching import replaced

__all__ = [
    "Cdist",
    "ScaledDotProductAttention",
    "block_elements",
    "cdist",
    "ctc_loss",
    "pdist",
    "replaced",
    "scaled_dot_product_attention",
]
