"""How the checker calls your Function: which arguments are differentiated, at which points.

A :class:`Call` puts the differentiated inputs back among the other arguments (positional and
keyword, as you passed them) and keeps the outputs that can be differentiated. The points are
your inputs, then points derived from them by a small relative perturbation, which keeps their
structure (signs, zeros, a positive-definite matrix stays one).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

# A derived point is x * (1 + e), |e| <= PERTURBATION elementwise.
PERTURBATION = 0.01


def differentiable(value: object) -> bool:
    """A tensor whose values can be differentiated: floating point or complex."""
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def at_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype`` (a real dtype), complex inputs in its complex counterpart."""
    return x.to(dtype.to_complex() if x.is_complex() else dtype)


def real_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype.to_real() if x.is_complex() else x.dtype


def describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}, shape {tuple(tensor.shape)}"


def kind(value: object) -> str:
    """``value``'s kind with its article: "an int64 tensor", "a NumPy array"."""
    if isinstance(value, torch.Tensor):
        what = f"{str(value.dtype).removeprefix('torch.')} tensor"
    elif isinstance(value, np.ndarray):
        what = "NumPy array"
    else:
        what = type(value).__name__
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def flatten(value: object) -> list[object]:
    """The leaves of nested tuples and lists (a Function's outputs)."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten(item)]
    return [value]


def quietly(compute: Callable[[], Any]) -> Any:
    """Run ``compute`` without torch's warnings about precision and deprecated internals."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compute()


def function_name(fn: Callable[..., Any]) -> str:
    owner = getattr(fn, "__self__", None)  # the Function class, for SomeFunction.apply
    if isinstance(owner, type):
        return f"{owner.__name__}.apply"
    return getattr(fn, "__qualname__", None) or repr(fn)


def is_custom_function(fn: Callable[..., Any]) -> bool:
    """``fn`` is a Function's ``apply`` itself (not a function calling one)."""
    owner = getattr(fn, "__self__", None)
    return isinstance(owner, type) and issubclass(owner, torch.autograd.Function)


@dataclasses.dataclass
class Call:
    """How to call ``fn`` with the differentiated inputs put back among the other arguments."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    slots: list[int | str]  # positions and keyword names of the differentiated inputs
    kept: list[int] = dataclasses.field(default_factory=list)  # checked output leaves
    # (data_ptr, shape) of every tensor a Function marked non-differentiable in the last call
    marked: list[tuple[int, torch.Size]] = dataclasses.field(default_factory=list)

    def label(self, slot: int | str) -> str:
        return f"argument {slot}" if isinstance(slot, int) else f"keyword '{slot}'"

    def given(self) -> list[torch.Tensor]:
        return [self.args[s] if isinstance(s, int) else self.kwargs[s] for s in self.slots]

    def constants(self) -> list[torch.Tensor]:
        """The tensors passed as they are (not differentiated)."""
        return [a for a in (*self.args, *self.kwargs.values()) if differentiable(a)]

    def outputs(self, *inputs: torch.Tensor, fresh: bool = False) -> list[object]:
        """The outputs' leaves. Inputs are cloned unless ``fresh`` (made for this call): the
        caller's tensors are never modified in place (mark_dirty), and the differentiated
        inputs stay leaves."""
        args, kwargs = list(self.args), dict(self.kwargs)
        for slot, value in zip(self.slots, inputs, strict=True):
            value = value if fresh else value.clone()
            if isinstance(slot, int):
                args[slot] = value
            else:
                kwargs[slot] = value
        return flatten(self.fn(*args, **kwargs))

    def __call__(self, *inputs: torch.Tensor, fresh: bool = False) -> tuple[torch.Tensor, ...]:
        leaves = self.outputs(*inputs, fresh=fresh)
        return tuple(leaves[i] for i in self.kept)  # type: ignore[misc]

    def scalar(self, weights: Sequence[torch.Tensor]) -> Callable[..., torch.Tensor]:
        """A fixed random weighted sum of the outputs: one scalar to differentiate twice."""

        def weighted(*inputs: torch.Tensor) -> torch.Tensor:
            return dot(self(*inputs), weights)

        return weighted


def dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    """The real inner product of two lists of tensors: complex ones as pairs of reals.

    With it, ``dot(grad, u)`` is the derivative of a real loss in the direction ``u``, in
    PyTorch's convention for complex inputs (the gradient is the conjugate Wirtinger
    derivative times two, so that ``grad = d/d(re) + i d/d(im)``).
    """
    device = a[0].device if a else "cpu"  # the inputs' device, never the default one
    total = torch.zeros((), dtype=torch.float64, device=device)
    for x, y in zip(a, b, strict=True):
        x, y = _as_real(x).reshape(-1), _as_real(y).reshape(-1)
        if x.numel():  # torch.dot: no temporary as large as the tensors
            total = total + torch.dot(x, y.to(x.dtype))
    return total


def _as_real(t: torch.Tensor) -> torch.Tensor:
    # An output may be a lazily conjugated view (fft.ifft's), which view_as_real refuses.
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def norm(tensors: Sequence[torch.Tensor]) -> float:
    """The Euclidean norm of a list of tensors (complex ones as pairs of reals)."""
    return float(sum(float(torch.linalg.vector_norm(t.detach())) ** 2 for t in tensors) ** 0.5)


def slots_of(
    args: tuple[Any, ...], kwargs: dict[str, Any], wrt: Sequence[int | str] | int | str | None
) -> list[int | str]:
    """Positions and names of the arguments to differentiate (``wrt``, or every float one)."""
    floating: list[int | str] = [i for i, a in enumerate(args) if differentiable(a)]
    floating += [k for k, v in kwargs.items() if differentiable(v)]
    if wrt is None:
        if not floating:
            raise TypeError(
                "check: no floating-point or complex tensor among the arguments, nothing to "
                "differentiate; pass example inputs after 'fn', e.g. "
                "check(MyFunction.apply, torch.randn(3))"
            )
        return floating
    wrt = (wrt,) if isinstance(wrt, (int, str)) else tuple(wrt)
    for slot in wrt:
        value = args[slot] if isinstance(slot, int) and -len(args) <= slot < len(args) else (
            kwargs.get(slot) if isinstance(slot, str) else None
        )  # fmt: skip
        if not differentiable(value):
            raise TypeError(
                f"check: wrt={slot!r} must name a floating-point tensor argument "
                f"(a position, or a key of kwargs), got {kind(value)}"
            )
    return [slot % len(args) if isinstance(slot, int) else slot for slot in wrt]


def derived_point(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``x * (1 + e)``, ``e`` uniform in ``[-PERTURBATION, PERTURBATION]`` elementwise.

    A small relative change keeps what the Function may need of its input: signs, zeros,
    an interval, a positive-definite or well-conditioned matrix.
    """
    e = torch.rand(x.shape, generator=generator, dtype=real_dtype(x), device="cpu") * 2 - 1
    return x * (1 + PERTURBATION * e.to(x.device))  # drawn on the CPU: the same everywhere


def preview(x: torch.Tensor, count: int = 4) -> str:
    """The first values of ``x``, to show a point in a message."""
    flat = x.detach().reshape(-1)
    values = ", ".join(f"{complex(v):.4g}" if x.is_complex() else f"{float(v):.4g}"
                       for v in flat[:count])  # fmt: skip
    more = ", ..." if flat.numel() > count else ""
    return f"[{values}{more}]"
