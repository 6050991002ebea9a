"""Input checks shared by the example Functions.

``Function.apply`` hands its arguments to ``forward`` unchanged, so a list or a string would
otherwise fail deep inside the arithmetic with a message that does not name the Function.
"""

from __future__ import annotations

from typing import Any

import torch


def check_real_tensor(
    function_name: str, argument_name: str, value: Any
) -> torch.Tensor:
    """Return ``value`` if it is a real (non-complex) tensor, else raise ``TypeError``.

    Complex tensors are refused rather than computed: the example formulas omit the complex
    conjugates that PyTorch's complex autograd convention needs, so their gradients would be
    silently wrong.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{function_name}: argument '{argument_name}' must be a torch.Tensor, "
            f"got {type(value).__name__}. Wrap plain data with torch.tensor(...) first."
        )
    if value.is_complex():
        raise TypeError(
            f"{function_name}: argument '{argument_name}' must be a real tensor, got dtype "
            f"{value.dtype}. These example Functions implement real-valued derivatives only."
        )
    return value
