"""What each way of saving costs: the tensors saved for backward, peak memory, the cases timed.

- :func:`saved_tensors` lists, exactly, the tensors autograd keeps for backward (counted with
  :class:`torch.autograd.graph.saved_tensors_hooks`), and says which are the input, which the
  output, and which are extra memory;
- :func:`aten_ops` lists the ATen operators a step runs, the backward's included;
- :func:`peak_memory` measures the most memory one step allocates above what was allocated
  before it, :func:`held_memory` what the step leaves allocated (a graph kept alive);
- :data:`CASES` pairs each Function of the package with its native counterpart; the benchmark
  ``benchmarks/functions.py`` times them and :func:`load_measurements` reads its committed
  results, which the "What it costs" page plots (:func:`time_series` picks one case's).

torch only: nothing here needs NumPy or matplotlib.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .functions import (
    higher_orders,
    saving_inputs,
    saving_intermediates,
    saving_outputs,
    setup_context_style,
    sinh_variants,
    untracked_backward,
)

#: Roles of a tensor saved by the forward pass.
INPUT, OUTPUT, EXTRA = "input", "output", "extra"
#: Roles of a tensor saved while the create_graph backward builds the second graph.
GRAD_OUTPUT, SAVED_BY_FORWARD, NEW = "grad_output", "saved by forward", "new"


@dataclass(frozen=True)
class SavedTensor:
    """One block of memory autograd keeps for backward: its role, shape, dtype and bytes.

    ``nbytes`` is the size of the tensor's storage: views of one storage count once.
    """

    role: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int


@dataclass(frozen=True)
class SavedReport:
    """What a function saves: for the first backward, and for the second one.

    ``forward`` lists what ``fn(x)`` saves, with roles ``"input"``, ``"output"`` (the
    returned tensor, which the caller holds anyway) and ``"extra"`` (memory kept alive only
    for backward). ``backward`` lists what the ``create_graph=True`` backward saves for the
    second backward, with roles ``"input"``, ``"output"``, ``"grad_output"``,
    ``"saved by forward"`` and ``"new"``.
    """

    forward: tuple[SavedTensor, ...]
    backward: tuple[SavedTensor, ...]

    @property
    def extra(self) -> tuple[SavedTensor, ...]:
        """The forward's saved tensors that are neither the input nor the output."""
        return tuple(saved for saved in self.forward if saved.role == EXTRA)

    @property
    def extra_bytes(self) -> int:
        return sum(saved.nbytes for saved in self.extra)

    @property
    def new_in_backward(self) -> tuple[SavedTensor, ...]:
        """The tensors the create_graph backward made and saved, which the second graph adds."""
        return tuple(saved for saved in self.backward if saved.role == NEW)

    @property
    def new_in_backward_bytes(self) -> int:
        return sum(saved.nbytes for saved in self.new_in_backward)


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return str(tensor.device), tensor.untyped_storage().data_ptr()


class _Recorder:
    """Keep every tensor packed for backward, in order, one entry per storage."""

    def __init__(self) -> None:
        self.tensors: dict[tuple[str, int], torch.Tensor] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # Holding the tensor keeps its storage alive, so no address is reused meanwhile.
        self.tensors.setdefault(_storage_key(tensor), tensor)
        return tensor

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda tensor: tensor)


def _describe(
    recorder: _Recorder, roles: dict[tuple[str, int], str], default: str
) -> tuple[SavedTensor, ...]:
    return tuple(
        SavedTensor(
            role=roles.get(key, default),
            shape=tuple(tensor.shape),
            dtype=tensor.dtype,
            nbytes=tensor.untyped_storage().nbytes(),
        )
        for key, tensor in recorder.tensors.items()
    )


def saved_tensors(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> SavedReport:
    """List the tensors ``fn(x)`` saves for backward, and those its backward saves in turn.

    ``fn`` takes one floating-point tensor and returns one tensor that depends on it. The
    first backward runs with ``create_graph=True`` and a gradient of ones, as a gradient
    penalty would; what it saves is what the second backward will need.
    """
    if not callable(fn):
        raise TypeError(f"saved_tensors: 'fn' must be callable, got {type(fn).__name__}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(
            f"saved_tensors: 'x' must be a floating-point torch.Tensor, got {got}"
        )
    x = x.detach().requires_grad_()
    forward = _Recorder()
    with forward.hooks():
        y = fn(x)
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        raise ValueError(
            "saved_tensors: fn(x) must return a tensor that depends on x (one with a grad_fn)"
        )
    roles = {_storage_key(x): INPUT, _storage_key(y): OUTPUT}
    grad_out = torch.ones_like(y)
    backward = _Recorder()
    with backward.hooks():
        torch.autograd.grad(y, x, grad_out, create_graph=True)
    backward_roles = {
        **dict.fromkeys(forward.tensors, SAVED_BY_FORWARD),
        **roles,
        _storage_key(grad_out): GRAD_OUTPUT,
    }
    return SavedReport(
        forward=_describe(forward, roles, EXTRA),
        backward=_describe(backward, backward_roles, NEW),
    )


class _OperatorLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def aten_ops(step: Callable[[], Any]) -> list[str]:
    """The names of the ATen operators ``step()`` runs, in order (``mul``, ``exp_``, ...).

    Logged by a ``TorchDispatchMode`` (``torch.utils._python_dispatch``), which sees every
    kernel call, those autograd makes while running a backward on the CPU included.
    """
    with _OperatorLog() as log:
        step()
    return log.names


def backward_ops(
    fn: Callable[[torch.Tensor], Any],
    x: torch.Tensor,
    *,
    grad_out_requires_grad: bool = False,
) -> tuple[list[str], list[str]]:
    """The ATen operators of the ``create_graph=True`` backward of ``fn`` at ``x``, then of
    the backward of that (both with incoming gradients of ones).

    With ``grad_out_requires_grad=True`` the first incoming gradient requires grad and the
    second backward is taken with respect to x and to it, as in a penalty
    (:func:`penalty_double_backward`).
    """
    x = x.detach().requires_grad_()
    y = fn(x)
    grad_out = torch.ones_like(y, requires_grad=grad_out_requires_grad)
    wrt = (x, grad_out) if grad_out_requires_grad else (x,)
    grads: list[torch.Tensor] = []

    def first_backward() -> None:
        grads.append(torch.autograd.grad(y, x, grad_out, create_graph=True)[0])

    first = aten_ops(first_backward)
    second = aten_ops(lambda: torch.autograd.grad(grads[0], wrt, torch.ones_like(x)))
    return first, second


def ops_listing(label: str, ops: list[str], width: int = 80, indent: int = 32) -> str:
    """``label`` then ``ops``, wrapped to ``width`` with the ops indented by ``indent``.

    A label too long for its column gets a line of its own, so it never runs into the ops.
    """
    lines = textwrap.wrap(" ".join(ops), width - indent) or [""]
    padded = [" " * indent + line for line in lines]
    if len(label) < indent:
        padded[0] = label.ljust(indent) + lines[0]
    else:
        padded.insert(0, label)
    return "\n".join(padded)


def peak_memory(step: Callable[[], Any], device: str | torch.device = "cpu") -> int:
    """Bytes allocated at the peak of ``step()``, above what was allocated when it began.

    On CUDA, from the caching allocator's own peak counter. On the CPU, from the allocations
    and frees ``torch.profiler`` records (``profile_memory=True``), replayed in time order:
    the high-water mark of their running sum. Only torch's allocator is seen (NumPy's arrays are
    not), and what ``step`` returns is dropped before the profile ends, so it counts as freed.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if device.type != "cpu":
        raise ValueError(f"peak_memory: device must be 'cpu' or 'cuda', got {device}")
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as profile:
        step()
    # Every allocation (+bytes) and free (-bytes), timed in nanoseconds. (profile.events()
    # folds allocations into the operator events, which would hide a short-lived temporary.)
    changes = sorted((
        (event.start_ns(), event.nbytes())
        for event in profile.profiler.kineto_results.events()
        if event.name() == "[memory]"
    ), key=lambda change: change[0])  # stable: simultaneous events keep their order
    total = peak = 0
    for _, change in changes:
        total += change
        peak = max(peak, total)
    return peak


def held_memory(step: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``step()`` on the CPU; return its result and the bytes it leaves allocated.

    The allocations and frees ``torch.profiler`` records while ``step`` runs, summed: what
    ``step`` allocated and did not free, minus what it freed of memory allocated before it.
    The result is held while the profile ends, so the memory it keeps alive (a tensor, the
    graph behind it, the saved tensors that graph holds) is counted. Bytes, not times: the
    same step gives the same number on any machine with the same torch. Only torch's
    allocator is seen; to count a step that frees memory, keep what it frees alive elsewhere.
    """
    if not callable(step):
        raise TypeError(f"held_memory: 'step' must be callable, got {type(step).__name__}")
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as profile:
        result = step()
    held = sum(
        event.nbytes()
        for event in profile.profiler.kineto_results.events()
        if event.name() == "[memory]"
    )
    return result, held


def forward_backward(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    grad_out: torch.Tensor,
) -> torch.Tensor:
    """One training step's worth of ``fn``: forward, then the gradient with respect to x."""
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(fn(x), x, grad_out)
    return grad_x


def double_backward(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    grad_out: torch.Tensor,
    grad_grad_x: torch.Tensor,
) -> torch.Tensor:
    """Forward, a ``create_graph=True`` backward, and the backward of that backward.

    What a gradient penalty or a Hessian-vector product does: returns
    the second-order term grad_grad_x · ∂(grad_x)/∂x.
    """
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(fn(x), x, grad_out, create_graph=True)
    (grad2_x,) = torch.autograd.grad(grad_x, x, grad_grad_x)
    return grad2_x


def penalty_double_backward(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    grad_out: torch.Tensor,
    grad_grad_x: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`double_backward` with a ``grad_out`` that requires grad, as in a penalty.

    In a gradient penalty or a composed loss the incoming gradient is itself computed from
    the parameters and from x, so it requires grad and the second backward reaches it too.
    Returns the second backward's gradients with respect to x and to grad_out.
    """
    x = x.detach().requires_grad_()
    grad_out = grad_out.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(fn(x), x, grad_out, create_graph=True)
    grad2_x, grad2_grad_out = torch.autograd.grad(grad_x, (x, grad_out), grad_grad_x)
    return grad2_x, grad2_grad_out


@dataclass(frozen=True)
class Case:
    """A custom Function of the package and the native op it is measured against.

    ``time_target`` is the most the double backward may take, as a multiple of the native
    op's, at 1e6 float32 elements on one thread; ``extra_saved_target`` is how many extra
    tensors (neither input nor output) the forward may save. ``None``: no target.
    """

    name: str
    function: str
    custom: Callable[[torch.Tensor], torch.Tensor]
    native_name: str
    native: Callable[[torch.Tensor], torch.Tensor]
    time_target: float | None = None
    extra_saved_target: int | None = None


def _square(x: torch.Tensor) -> torch.Tensor:
    return x**2


def _cube(x: torch.Tensor) -> torch.Tensor:
    return x**3


_FUNCTIONS = "double_backward.functions"

#: Every Function the package ships that computes an elementwise value, with its native op.
CASES: tuple[Case, ...] = (
    Case("Square", f"{_FUNCTIONS}.saving_inputs.Square",
         saving_inputs.Square.apply, "x**2", _square, 1.0, 0),
    Case("Exp", f"{_FUNCTIONS}.saving_outputs.Exp",
         saving_outputs.Exp.apply, "torch.exp", torch.exp, 1.15, 0),
    Case("Sinh", f"{_FUNCTIONS}.saving_intermediates.Sinh",
         saving_intermediates.sinh, "torch.sinh", torch.sinh, 1.5, 2),
    Case("Cube (NumPy backward)", f"{_FUNCTIONS}.untracked_backward.Cube",
         untracked_backward.Cube.apply, "x**3", _cube, 1.25, 0),
    Case("Square (setup_context)", f"{_FUNCTIONS}.setup_context_style.Square",
         setup_context_style.Square.apply, "x**2", _square),
    Case("Exp (setup_context)", f"{_FUNCTIONS}.setup_context_style.Exp",
         setup_context_style.Exp.apply, "torch.exp", torch.exp),
    Case("Cube (setup_context)", f"{_FUNCTIONS}.setup_context_style.Cube",
         setup_context_style.Cube.apply, "x**3", _cube),
    Case("Sin", f"{_FUNCTIONS}.higher_orders.Sin",
         higher_orders.Sin.apply, "torch.sin", torch.sin),
    Case("Cos", f"{_FUNCTIONS}.higher_orders.Cos",
         higher_orders.Cos.apply, "torch.cos", torch.cos),
    Case("Sinh, tutorial form", f"{_FUNCTIONS}.sinh_variants.SinhTutorial",
         sinh_variants.sinh_tutorial, "torch.sinh", torch.sinh),
    Case("Sinh, before: out of place", f"{_FUNCTIONS}.sinh_variants.SinhOutOfPlace",
         sinh_variants.sinh_out_of_place, "torch.sinh", torch.sinh),
    Case("Sinh, zeros materialised", f"{_FUNCTIONS}.sinh_variants.SinhMaterialized",
         sinh_variants.sinh_materialized, "torch.sinh", torch.sinh),
    Case("Sinh, recompute in backward", f"{_FUNCTIONS}.sinh_variants.SinhRecompute",
         sinh_variants.SinhRecompute.apply, "torch.sinh", torch.sinh),
    Case("Sinh, native ops inside", f"{_FUNCTIONS}.sinh_variants.SinhNativeOps",
         sinh_variants.SinhNativeOps.apply, "torch.sinh", torch.sinh),
)  # fmt: skip


# The committed benchmark results in measurements/, by name.
MEASUREMENTS = ("functions", "attention", "call_overhead", "softmax_layer_norm")


def load_measurements(name: str = "functions") -> dict[str, Any]:
    """A benchmark's committed results, ``measurements/<name>.json`` in the package.

    ``"functions"``: the Functions of the package against their native ops
    (``benchmarks/functions.py``); ``"attention"``:
    :func:`double_backward.ops.scaled_dot_product_attention` against torch's MATH backend
    (the same script); ``"call_overhead"``: a custom operator's call against a Function's
    (``benchmarks/call_overhead.py``); ``"softmax_layer_norm"``: the softmax and LayerNorm
    Functions (``benchmarks/softmax_layer_norm.py``).
    """
    if name not in MEASUREMENTS:
        raise ValueError(
            f"load_measurements: name must be one of {sorted(MEASUREMENTS)}, got {name!r}"
        )
    text = resources.files(__package__).joinpath("measurements", f"{name}.json")
    return json.loads(text.read_text(encoding="utf-8"))


def load_cuda_measurements() -> list[dict[str, Any]]:
    """The committed GPU runs, one per torch release, oldest release first.

    Each is a ``measurements/cuda/torch-<release>.json`` of the package: the GPU, the torch
    build, the date, ``source`` (where the figures come from), ``results`` (a gradient
    penalty's outcome per probe, empty until a GPU run is recorded) and, where measured,
    ``attention_cost``.
    """
    folder = resources.files(__package__).joinpath("measurements", "cuda")
    runs = [
        json.loads(path.read_text(encoding="utf-8"))
        for path in folder.iterdir()
        if path.name.startswith("torch-") and path.name.endswith(".json")
    ]
    return sorted(runs, key=lambda run: tuple(int(part) for part in run["torch"].split(".")))


def time_series(
    times: list[dict[str, Any]], case: str, kind: str = "double_backward"
) -> tuple[list[int], list[float], list[float], list[float]]:
    """One case's committed time ratios by size: (sizes, median ratio, first quartile, third
    quartile), ascending in size. ``times`` is ``load_measurements()["devices"]["cpu"]["times"]``;
    ``kind`` is ``"double_backward"`` or ``"forward_backward"``."""
    rows = sorted((r for r in times if r["case"] == case and r["kind"] == kind),
                  key=lambda r: r["size"])  # fmt: skip
    if not rows:
        known = sorted({(r["case"], r["kind"]) for r in times})
        raise ValueError(f"time_series: no times for case {case!r}, kind {kind!r}; the "
                         f"measurements have (case, kind) in {known}")  # fmt: skip
    sizes, ratios, q1, q3 = (
        [r[key] for r in rows] for key in ("size", "ratio", "ratio_q1", "ratio_q3")
    )
    return sizes, ratios, q1, q3
