"""The fix for each built-in whose double backward raises: by ATen op and by module type.

:data:`FIXES` is the one table: the built-ins table on the site
(``docs/_ext/builtins_table.py``) shows it, and :func:`~double_backward.check_model` prints
its entry for each break. An entry is keyed by the ATen operator an error names (its
``_backward`` stripped), by the op's OpInfo name, or by a module type (``nn.MultiheadAttention``):
:func:`fix_for` looks the module up first, since a module's fix can say more than its op's
(MultiheadAttention's ``need_weights=True`` does not call the fused kernel at all).
"""

from __future__ import annotations

from torch import nn

from .cuda_fixes import CUDA_FIXES, CUDNN_RNN_EVAL_MESSAGE

DOCS_URL = "https://double-backward.readthedocs.io/en/latest/"
BUILTINS_PAGE = (
    DOCS_URL
    + "auto_examples/builtins_and_models/plot_14_builtins_without_double_backward.html"
)
BUILTINS_TABLE = DOCS_URL + "builtins.html"
HIGHER_ORDERS_PAGE = DOCS_URL + "auto_examples/writing/plot_08_higher_orders.html"
FAILURES_PAGE = DOCS_URL + "auto_examples/when_it_breaks/plot_13_failure_gallery.html"
UNTRACKED_PAGE = DOCS_URL + "auto_examples/tutorial/plot_04_untracked_backward.html"

_SDPA_FIX = (
    "run attention under `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)` (it saves the "
    "L x L attention matrix), or call `double_backward.ops.scaled_dot_product_attention`"
)
_CDIST_FIX = (
    'for p = 2, `torch.cdist(..., compute_mode="use_mm_for_euclid_dist")`; for every p '
    "torch takes (p >= 0 or inf), `double_backward.ops.cdist`"
)
_CTC_FIX = "`double_backward.ops.ctc_loss`, a log-space recursion of differentiable ops"
_EMBEDDING_BAG_FIX = (
    "`F.embedding(...) * per_sample_weights[:, None]`, then `index_add` per bag"
)
#: The fix for each built-in whose double backward raises, keyed by the ATen operator an error
#: names (its ``_backward`` stripped), by the op's OpInfo name, or by ``nn.<module type>``.
#: The built-ins table on the site and :func:`~double_backward.check_model` both read it.
FIXES: dict[str, str] = {
    "_scaled_dot_product_flash_attention_for_cpu": _SDPA_FIX,
    "nn.functional.scaled_dot_product_attention": _SDPA_FIX,
    "nn.TransformerEncoderLayer (train)": _SDPA_FIX,
    "nn.TransformerEncoderLayer (eval)": _SDPA_FIX,
    # need_weights=True (the default) computes the softmax itself: the built-ins scan passes.
    "nn.MultiheadAttention": _SDPA_FIX
    + "; or leave `need_weights=True`, the default, which does not call the fused kernel",
    "_cdist": _CDIST_FIX,
    "cdist": _CDIST_FIX,
    "_ctc_loss": _CTC_FIX,
    "nn.functional.ctc_loss": _CTC_FIX,
    "_pdist": "`double_backward.ops.pdist`",
    "nn.functional.pdist": "`double_backward.ops.pdist`",
    # The same values from ops that have a double backward (their second derivative is 0).
    "hardsigmoid": "`F.relu6(x + 3) / 6`, the same function",
    "nn.functional.hardsigmoid": "`F.relu6(x + 3) / 6`, the same function",
    "_embedding_bag_per_sample_weights": _EMBEDDING_BAG_FIX,
    "nn.functional.embedding_bag": _EMBEDDING_BAG_FIX,
    "nn.EmbeddingBag": _EMBEDDING_BAG_FIX,
    # It raises with weight=None and a bias, through F.layer_norm too; an explicit weight of
    # ones passes the penalty and gradgradcheck (checked with plain torch, 2.13).
    "native_layer_norm": (
        "pass an explicit `weight=torch.ones(normalized_shape)` when there is a bias: "
        "`weight=None` with a bias raises in `F.layer_norm` too"
    ),
}
FIXES.update(CUDA_FIXES)  # the fused attention kernels and cuDNN RNNs, on CUDA
NO_FIX = (
    "no switch in torch: compute it with differentiable ops, or in a custom Function whose "
    "backward is differentiable (read: " + UNTRACKED_PAGE + ")"
)


def module_key(module: object) -> str | None:
    """``nn.<type>`` for a module of one of torch.nn's own types (a subclass counts as its
    torch.nn base), else None."""
    if not isinstance(module, nn.Module):
        return None
    for cls in type(module).__mro__:
        if (
            cls.__module__.startswith("torch.nn.modules")
            and f"nn.{cls.__name__}" in FIXES
        ):
            return f"nn.{cls.__name__}"
    return None


def fix_for(op: str, module: object = None) -> str:
    """The fix for the built-in ``op`` (an ATen or OpInfo name) raising in ``module``: the
    module type's entry if it has one, else the op's, else how to write one."""
    key = module_key(module)
    if key is not None:
        return FIXES[key]
    name = op.removeprefix("aten::").removesuffix(".default").removesuffix("_backward")
    return FIXES.get(name) or FIXES.get(op) or NO_FIX


def fix_for_message(message: str) -> tuple[str, str] | None:
    """``(what, fix)`` for an error whose message names no operator but has a row of its own
    (cuDNN's RNN backward in eval mode), else None."""
    if CUDNN_RNN_EVAL_MESSAGE in message:
        return "cuDNN RNN backward (eval mode)", FIXES[CUDNN_RNN_EVAL_MESSAGE]
    return None


__all__ = ["FIXES", "fix_for_message", "NO_FIX", "fix_for", "module_key"]
