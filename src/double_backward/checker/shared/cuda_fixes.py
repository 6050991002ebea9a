"""The fixes for the CUDA kernels that have no double backward, keyed as ``model.FIXES`` is.

The kernels, as a report of a run on an NVIDIA H200 with torch 2.11.0+cu130 named them (no
probe run of ``nox -s matrix -- --device cuda`` is committed yet): a gradient penalty through
``F.scaled_dot_product_attention`` raises with each fused backend (flash, efficient, cuDNN) in
the dtypes it takes, and through cuDNN's ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` in train mode;
in eval mode even the penalty's first backward raises. On the CPU none of these kernels runs.
Keys are the ATen operator an error names, ``_backward`` stripped
(as :func:`~double_backward.checker.model.fix_for` looks them up), and the eval-mode error's
message, which names no operator.
"""

from __future__ import annotations

_REPLACED = "or run the forward inside `with double_backward.ops.replaced():`"

_CUDA_SDPA_FIX = (
    "run attention under `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)` (it saves the "
    "L x L attention matrix), or call `double_backward.ops.scaled_dot_product_attention`, "
    + _REPLACED
)

_CUDNN_RNN_FIX = (
    "run the RNN's forward under `torch.backends.cudnn.flags(enabled=False)` (the native "
    "CUDA kernels have a double backward), "
    + _REPLACED
    + ", which turns cuDNN off for "
    "RNNs only"
)

#: The message of cuDNN's RNN backward in eval mode (a penalty's first backward raises it).
CUDNN_RNN_EVAL_MESSAGE = "cudnn RNN backward can only be called in training mode"

CUDA_FIXES: dict[str, str] = {
    "_scaled_dot_product_flash_attention": _CUDA_SDPA_FIX,
    "_scaled_dot_product_efficient_attention": _CUDA_SDPA_FIX,
    "_scaled_dot_product_cudnn_attention": _CUDA_SDPA_FIX,
    "_cudnn_rnn": _CUDNN_RNN_FIX,
    CUDNN_RNN_EVAL_MESSAGE: (
        _CUDNN_RNN_FIX + " (in eval mode cuDNN's RNN backward refuses even the first "
        "backward of a penalty)"
    ),
}

__all__ = ["CUDA_FIXES", "CUDNN_RNN_EVAL_MESSAGE"]
