"""``replaced()``: the model you have, with the built-ins that break double backward swapped out."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .attention import scaled_dot_product_attention
from .ctc import ctc_loss
from .distances import cdist, pdist

__all__ = ["replaced"]


@contextlib.contextmanager
def _cudnn_off() -> Iterator[None]:
    """cuDNN off for the block, only that flag touched (benchmark, tf32... stay as they are).

    Through ``cudnn.flags()``, the one way that also works after
    ``torch.backends.disable_global_flags()`` (torch's own test utilities call it); its other
    arguments get their current values, since its defaults would change them."""
    cudnn = torch.backends.cudnn
    others = {
        name: getattr(cudnn, name)
        for name in inspect.signature(cudnn.flags).parameters
        if name != "enabled" and hasattr(cudnn, name)
    }
    with cudnn.flags(enabled=False, **others):
        yield


def _without_cudnn(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def forward_without_cudnn(*args: Any, **kwargs: Any) -> Any:
        # cuDNN's RNN backward has no derivative (CUDA; issue 28): the native kernels do.
        with _cudnn_off():
            return forward(*args, **kwargs)

    return forward_without_cudnn


def _patches() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for everything ``replaced()`` sets."""
    patches: list[tuple[Any, str, Any]] = [
        (F, "scaled_dot_product_attention", scaled_dot_product_attention),
        (torch, "cdist", cdist),
        (F, "pdist", pdist),
        (torch, "pdist", pdist),
        (F, "ctc_loss", ctc_loss),
    ]
    for module in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):
        if "forward" in vars(module):
            patches.append((module, "forward", _without_cudnn(vars(module)["forward"])))
    return patches


_lock = threading.Lock()
_depth = 0
_saved: list[tuple[Any, str, Any]] = []


class replaced:  # noqa: N801 - used like torch.no_grad: with ops.replaced():
    """Inside the block, the torch functions without a double backward are the replacements.

    Usage, around the forward of a model you did not write::

        with double_backward.ops.replaced():
            loss = model(x).square().sum()
        (grad,) = torch.autograd.grad(loss, x, create_graph=True)
        (loss + grad.square().sum()).backward()

    Only the forward needs the block: the replacements are recorded in the graph, so the
    backward passes may run after it.

    Inside the block:

    - ``torch.nn.functional.scaled_dot_product_attention`` is
      :func:`~double_backward.ops.scaled_dot_product_attention`, and so is the attention of
      ``nn.MultiheadAttention`` (with ``need_weights=False``, as ``nn.TransformerEncoderLayer``
      and ``nn.TransformerDecoderLayer`` call it) and of Hugging Face transformers' ``"sdpa"``
      attention, which look the function up in ``torch.nn.functional`` at every call;
    - ``torch.cdist`` is :func:`~double_backward.ops.cdist` (which takes ``compute_mode`` and
      ignores it: one formula serves every size);
    - ``torch.nn.functional.pdist`` (which is ``torch.pdist``, patched too) is
      :func:`~double_backward.ops.pdist`;
    - ``torch.nn.functional.ctc_loss``, and so ``nn.CTCLoss``, is
      :func:`~double_backward.ops.ctc_loss`;
    - the ``forward`` of ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU`` (and of their subclasses that do
      not override it) runs with cuDNN off, so a CUDA RNN takes the native kernels, which have a
      double backward; cuDNN stays on for everything else (convolutions keep their speed).

    What it does not patch: a name bound before the block
    (``from torch.nn.functional import scaled_dot_product_attention`` at the top of a module keeps
    the torch function), a model compiled or traced before the block, the fast paths
    ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` take only when autograd records
    nothing (so never in a gradient penalty), and the ops' options the replacements refuse
    (``dropout_p`` > 0 raises a ValueError: use dropout 0, or ``model.eval()``).

    On leaving the block, also by an exception, every attribute it set is restored to exactly the
    object it replaced. Blocks nest: an inner block inside an outer one changes nothing, and only
    the outermost restores. The patches are process-wide, not per thread.
    """

    def __enter__(self) -> None:
        global _depth
        with _lock:
            if _depth == 0:
                for owner, name, replacement in _patches():
                    _saved.append((owner, name, getattr(owner, name)))
                    setattr(owner, name, replacement)
            _depth += 1

    def __exit__(self, *exc_info: object) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                while _saved:
                    owner, name, original = _saved.pop()
                    setattr(owner, name, original)
