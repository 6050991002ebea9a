"""Argument checks shared by the replacement ops."""

from __future__ import annotations

from typing import Any

import torch


def _check_tensor(op: str, name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{op}: '{name}' must be a torch.Tensor, got {type(value).__name__}"
        )
    if not value.is_floating_point():
        raise TypeError(
            f"{op}: '{name}' must be a real floating-point tensor, got dtype {value.dtype}"
        )
    return value
