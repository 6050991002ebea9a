"""Is a gradient penalty's gradient synchronized under DDP or FSDP? Measured, not assumed.

>>> report = check_distributed(make_critic, r1_penalty, x, world_size=2, wrapper="ddp")
>>> print(report)  # synchronized / not synchronized (error per parameter) / raises, the fix

:func:`~double_backward.check_distributed` runs your step on ``world_size`` local processes
(``gloo`` over the loopback interface, see :mod:`~double_backward.distributed.launch`),
each on its share of the batch, with the model wrapped in ``DistributedDataParallel`` or
sharded with ``fully_shard``. It runs the step ``steps`` times (DDP raises only at the step
after an unsynchronized one), then compares the gradient each rank ends with against the one
that a single process computes without a wrapper: the mean over the shares of the gradient
of each share's loss, which is what an averaging all-reduce must give.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import textwrap
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .launch import check_importable, launch

WRAPPERS = ("ddp", "fsdp")
PAGE = "https://double-backward.readthedocs.io/en/latest/auto_examples/builtins_and_models/plot_22_ddp_and_fsdp.html"

_SYNC_FIX = (
    "run the step inside `double_backward.distributed.synchronized_gradients(model)` "
    "(no_sync(), then an explicit all_reduce of the gradients)"
)
#: The fix for each outcome, keyed by (wrapper, what happened). Each was measured on the
#: page, torch 2.13.0, CPU, gloo.
FIXES: dict[tuple[str, str], str] = {
    ("ddp", "not synchronized"): (
        "DDP all-reduces a step's gradients only once every parameter got one in the "
        "backward it watches, and this step leaves some without one; "
        "find_unused_parameters=True and static_graph=True do not change that. Add the "
        "penalty to a loss that uses every parameter, in one backward (the critic loss, "
        "or `+ 0 * out.sum()` on a penalty step of its own), or " + _SYNC_FIX
    ),
    ("ddp", "reduction"): (
        "the step before left DDP waiting for the gradients of parameters the penalty "
        "does not reach, so nothing was all-reduced then either. Add the penalty to a "
        "loss that uses every parameter, in one backward (the critic loss, or "
        "`+ 0 * out.sum()`), or " + _SYNC_FIX
    ),
    ("ddp", "in-place"): (
        "`backward(create_graph=True)` on a DDP model raises inside that backward, where "
        "DDP reduces the parameters' gradients (without DDP the same step runs). Take the "
        "input gradient with "
        "`torch.autograd.grad(out.sum(), x, create_graph=True)` and add the penalty to a "
        "loss that uses every parameter, or " + _SYNC_FIX
    ),
    ("fsdp", "storage"): (
        "fully_shard frees each module's unsharded parameters after that module's first "
        "backward (the grad(..., create_graph=True)), and the second backward reads "
        "them; reshard_after_forward=False does not change that. Run the step inside "
        "`double_backward.distributed.synchronized_gradients(model)`: it keeps the "
        "parameters unsharded until the step ends, then averages the full gradients and "
        "shards them into .grad (the step costs the unsharded model's memory)"
    ),
    ("fsdp", "not synchronized"): (
        "fully_shard reduce-scatters the gradients in hooks of the first backward, before "
        "the penalty's backward computes them. "
        + _SYNC_FIX.replace(
            "(no_sync(), then an explicit all_reduce of the gradients)",
            "(it averages the full gradients, then shards them into .grad)",
        )
    ),
    ("", "one process"): (
        "the step fails without any wrapper too: check the model alone first, with "
        "`double_backward.check_model`"
    ),
}
_OTHER_FIX = "read " + PAGE


def fix_for(wrapper: str, kind: str, message: str = "") -> str:
    """The fix for what a step under ``wrapper`` did (``kind``, and its error ``message``)."""
    if kind == "raises":
        for key in ("reduction", "in-place", "storage"):
            if key in message and (wrapper, key) in FIXES:
                return FIXES[wrapper, key]
        return _OTHER_FIX
    return FIXES.get((wrapper, kind), _OTHER_FIX)


@dataclasses.dataclass(frozen=True)
class Case:
    """One thing to check: ``penalty(model, *share)`` on ``make_model()`` under ``wrapper``."""

    make_model: Callable[[], nn.Module]
    penalty: Callable[..., torch.Tensor | None]
    inputs: tuple[torch.Tensor, ...]
    wrapper: str = "ddp"
    wrapper_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    steps: int = 2
    seed: int = 0
    # What the report calls it; by default the names of make_model and penalty.
    title: str = ""

    def __post_init__(self) -> None:
        check_importable(self.make_model, "make_model")
        check_importable(self.penalty, "penalty")
        if self.wrapper not in WRAPPERS:
            raise ValueError(f"wrapper must be one of {WRAPPERS}, got {self.wrapper!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps must be a positive int, got {self.steps!r}")
        if not self.inputs or not all(isinstance(t, torch.Tensor) for t in self.inputs):
            raise TypeError(
                "inputs must be a tensor or a tuple of tensors (the whole batch)"
            )

    def name(self) -> str:
        return self.title or f"{self.make_model.__name__} + {self.penalty.__name__}"


@dataclasses.dataclass(frozen=True)
class Step:
    """What one step did: its gradients on every rank compared, or the error it raised."""

    kind: str  # "synchronized", "not synchronized" or "raises"
    # parameter -> relative error against one process, the largest over the ranks
    errors: dict[str, float] = dataclasses.field(default_factory=dict)
    message: str = ""  # the first sentence of the error, for "raises"


@dataclasses.dataclass(frozen=True)
class DistributedReport:
    """What :func:`~double_backward.check_distributed` found: a :class:`Step` per step run,
    and the fix."""

    title: str
    wrapper: str
    world_size: int
    steps: list[Step]
    # Parameters the step gives no gradient in one process (DDP waits for theirs).
    without_gradient: list[str] = dataclasses.field(default_factory=list)
    fix: str = ""

    @property
    def verdict(self) -> str:
        """``"synchronized"``, ``"not synchronized"``, ``"raises"``, or
        ``"raises in one process"`` (the step fails without a wrapper: nothing to compare)."""
        kinds = [step.kind for step in self.steps]
        for kind in ("raises in one process", "raises", "not synchronized"):
            if kind in kinds:
                return kind
        return "synchronized"

    @property
    def ok(self) -> bool:
        """True when every step ended with the gradient of one process on every rank."""
        return self.verdict == "synchronized"

    def __str__(self) -> str:
        wrapper = {"ddp": "DDP", "fsdp": "FSDP (fully_shard)"}[self.wrapper]
        lines = [
            f"{self.title}, {wrapper} on {self.world_size} processes: {self.verdict}"
        ]
        for number, step in enumerate(self.steps, 1):
            if step.kind.startswith("raises"):
                lines.append(_wrap(f"step {number}: {step.kind}: {step.message}"))
                continue
            if step.kind == "synchronized":
                count = len(step.errors)
                lines.append(f"  step {number}: synchronized (all {count} parameters)")
                continue
            errors = ", ".join(
                f"{name} {_number(e)}" for name, e in step.errors.items()
            )
            text = (
                f"step {number}: {step.kind} (relative error per parameter: {errors})"
            )
            lines.append(_wrap(text))
        if not self.ok and self.without_gradient:
            names = ", ".join(self.without_gradient)
            lines.append(_wrap(f"no gradient from this step, in one process: {names}"))
        if not self.ok:
            lines.append(_wrap(f"fix: {self.fix}"))
        return "\n".join(lines)


def _number(value: float) -> str:
    return "0" if value == 0 else f"{value:.2g}"


def _wrap(text: str) -> str:
    return textwrap.fill(
        text, 88, initial_indent="  ", subsequent_indent="    ",
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


def first_sentence(error: BaseException) -> str:
    """``Type: the error's first sentence`` (DDP's first line is a paragraph)."""
    line = (str(error).strip().splitlines() or [""])[0]
    end = line.find(". ")
    return f"{type(error).__name__}: {line[: end + 1] if end >= 0 else line}"


# -- the public entry point -------------------------------------------------------------
def check_distributed(
    make_model: Callable[[], nn.Module],
    penalty: Callable[..., torch.Tensor | None],
    inputs: torch.Tensor | Sequence[torch.Tensor],
    world_size: int = 2,
    wrapper: str = "ddp",
    *,
    wrapper_kwargs: dict[str, Any] | None = None,
    steps: int = 2,
    seed: int = 0,
    timeout: float = 120.0,
) -> DistributedReport:
    """Is the gradient of ``penalty`` synchronized under DDP or FSDP on ``world_size`` processes?

    ``make_model()`` builds the model (called after ``torch.manual_seed(seed)`` in every
    process, so every copy starts equal). ``penalty(model, *share)`` runs one training
    step's loss on the wrapped model and a share of ``inputs`` (each tensor split along
    its first dimension into ``world_size`` equal shares): it returns the loss to
    backward, or ``None`` when it called backward itself. Both must be top-level functions
    of a module: the processes are spawned and import them by name (a lambda, a local
    function or one defined in a notebook raises :class:`TypeError`).

    ``wrapper="ddp"`` wraps the model in
    ``DistributedDataParallel(model, **wrapper_kwargs)``; ``"fsdp"`` calls
    ``fully_shard(module, mesh=mesh, **wrapper_kwargs)`` on every submodule that holds
    parameters of its own, then on the model. The step runs ``steps`` times (gradients set
    to None before each); every rank's gradients after each step are compared with one
    process's, computed here without a wrapper: the mean over the shares of the gradient of
    each share's step. The processes use ``gloo`` on the loopback interface and are killed
    after ``timeout`` seconds.
    """
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    case = Case(
        make_model,
        penalty,
        tuple(inputs),
        wrapper,
        dict(wrapper_kwargs or {}),
        steps,
        seed,
    )
    return check_cases([case], world_size, timeout=timeout)[0]


def check_cases(
    cases: Sequence[Case], world_size: int = 2, *, timeout: float = 120.0
) -> list[DistributedReport]:
    """:func:`~double_backward.check_distributed` for several cases in one launch (the
    processes start once)."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    for case in cases:
        for tensor in case.inputs:
            if tensor.dim() == 0 or tensor.shape[0] % world_size:
                raise ValueError(
                    f"{case.name()}: every input's first dimension must split into "
                    f"{world_size} equal shares, got shape {tuple(tensor.shape)}"
                )
    per_rank = launch(_RankTask(list(cases)), world_size, timeout=timeout)
    return [
        _report(case, world_size, [ranks[index] for ranks in per_rank])
        for index, case in enumerate(cases)
    ]


# -- one process: the expected gradient ---------------------------------------------------
def _shares(case: Case, world_size: int, rank: int) -> tuple[torch.Tensor, ...]:
    return tuple(t.detach().chunk(world_size)[rank].clone() for t in case.inputs)


def _run_step(
    case: Case, model: nn.Module, share: tuple[torch.Tensor, ...], rank: int
) -> None:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(
        case.seed + 1 + rank
    )  # the same random numbers as one process on it
    loss = case.penalty(model, *share)
    if loss is not None:
        loss.backward()


def _one_process(
    case: Case, world_size: int
) -> tuple[dict[str, torch.Tensor] | str, list[str]]:
    """The mean over the shares of each share's gradient, or the step's error; unused names."""
    torch.manual_seed(case.seed)
    model = case.make_model()
    names = [name for name, _ in model.named_parameters()]
    total = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    reached: set[str] = set()
    with warnings.catch_warnings():
        # torch's note on backward(create_graph=True) keeping a reference cycle in .grad
        warnings.filterwarnings("ignore", "Using backward\\(\\) with create_graph=True")
        for rank in range(world_size):
            try:
                _run_step(case, model, _shares(case, world_size, rank), rank)
            except Exception as error:  # noqa: BLE001 - reported, with its first sentence
                return first_sentence(error), []
            for name, p in model.named_parameters():
                if p.grad is not None:
                    total[name] += p.grad.detach()
                    reached.add(name)
            model.zero_grad(set_to_none=True)  # drops a graph kept in .grad
    return {n: g / world_size for n, g in total.items()}, [
        n for n in names if n not in reached
    ]


def _report(case: Case, world_size: int, ranks: list[list[Any]]) -> DistributedReport:
    expected, without = _one_process(case, world_size)
    if isinstance(expected, str):
        steps = [Step("raises in one process", message=expected)]
        return DistributedReport(
            case.name(), case.wrapper, world_size, steps, fix=FIXES["", "one process"]
        )
    steps = []
    for number in range(case.steps):
        outcomes = [rank[number] for rank in ranks if number < len(rank)]
        errors = [o for o in outcomes if isinstance(o, str)]
        if errors:
            steps.append(Step("raises", message=errors[0]))
            break
        steps.append(_compare(expected, outcomes))
    kind = next((s.kind for s in steps if s.kind != "synchronized"), "synchronized")
    message = next((s.message for s in steps if s.message), "")
    return DistributedReport(
        case.name(), case.wrapper, world_size, steps, without,
        fix_for(case.wrapper, kind, message),
    )  # fmt: skip


def _compare(expected: dict[str, torch.Tensor], ranks: list[dict]) -> Step:
    errors: dict[str, float] = {}
    synchronized = True
    for name, want in expected.items():
        # Two ranks' sums differ from one process's only by rounding: a few ulps of the norm.
        tolerance = 64 * torch.finfo(want.dtype).eps * max(1, want.numel()) ** 0.5
        largest = 0.0
        for grads in ranks:
            got = grads[name]
            scale = max(want.norm().item(), got.norm().item())
            error = 0.0 if scale == 0 else (got - want).norm().item() / scale
            largest = max(largest, error if math.isfinite(error) else math.inf)
        synchronized &= largest <= tolerance
        errors[name] = 0.0 if largest <= tolerance else largest
    return Step("synchronized" if synchronized else "not synchronized", errors)


# -- each rank ---------------------------------------------------------------------------
class _RankTask:
    """Runs every case on one rank; each case's result is one entry per step run:
    its gradients by name, or the first sentence of the error it raised."""

    def __init__(self, cases: list[Case]) -> None:
        self.cases = cases

    def __call__(self, rank: int, world_size: int) -> list[list[Any]]:
        import torch.distributed as dist

        results = []
        for case in self.cases:
            dist.barrier()  # a case that raised on one rank only does not shift the next
            results.append(_rank_case(case, rank, world_size))
            gc.collect()  # the wrappers' hooks and buckets of this case
        return results


def _rank_case(case: Case, rank: int, world_size: int) -> list[Any]:
    torch.manual_seed(case.seed)
    try:
        model = _wrap_model(case, case.make_model())
    except Exception as error:  # noqa: BLE001 - reported as the first step's error
        return [first_sentence(error)]
    share = _shares(case, world_size, rank)
    outcomes: list[Any] = []
    for _ in range(case.steps):
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings(
                    "ignore", "Using backward\\(\\) with create_graph=True"
                )
                _run_step(case, model, share, rank)
            outcomes.append(_gradients(model))
        except Exception as error:  # noqa: BLE001 - reported, with its first sentence
            outcomes.append(first_sentence(error))
            break
    with contextlib.suppress(Exception):
        model.zero_grad(set_to_none=True)
    return outcomes


def _wrap_model(case: Case, model: nn.Module) -> nn.Module:
    if case.wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, **case.wrapper_kwargs)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    owners = [
        module for module in model.modules()
        if module is not model and any(True for _ in module.parameters(recurse=False))
    ]  # fmt: skip
    for module in reversed(owners):  # the innermost first, as FSDP2 expects
        fully_shard(module, mesh=mesh, **case.wrapper_kwargs)
    return fully_shard(model, mesh=mesh, **case.wrapper_kwargs)


def _gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's full gradient by its name in the unwrapped model (zeros if None)."""
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel

    inner = model.module if isinstance(model, DistributedDataParallel) else model
    grads = {}
    for name, p in inner.named_parameters():
        grad = p.grad
        if isinstance(grad, DTensor):
            grad = (
                grad.full_tensor()
            )  # a collective: every rank runs it in the same order
        elif grad is None:
            grad = torch.zeros(p.shape, dtype=p.dtype)
        grads[name] = grad.detach().clone()
    return grads
