"""Check a whole model for double-backward support, and name the layer that breaks it.

>>> report = check_model(nn.TransformerEncoder(layer, num_layers=2), x)
>>> print(report)  # the verdict first, then one entry per break

:func:`~double_backward.check_model` runs the gradient penalty a reader runs, on a copy of the
model (``wrt`` chooses which; the report names it):

- ``wrt="inputs"`` (the default when an input is floating point): R1 and WGAN-GP: the
  gradient of the output with respect to the inputs with ``create_graph=True``, its squared
  norm, then the backward to the inputs and the parameters;
- ``wrt="parameters"`` (the default when none is: token ids): MAML, and the
  Hessian-vector products of second-order optimizers and influence functions: the same with
  respect to the parameters;
- ``wrt="both"``;
- ``wrt="embeddings"``: a penalty or adversarial step on the embeddings of a text model
  given token ids: the same with respect to the output of its input embedding.

An error there is a break of kind ``"raises"``. Then, in float64 (a float64 copy of the
model; casts the model makes to float32 are widened to float64, and float32 computations that
remain are detected and the comparison held to float32's precision), it compares the penalty's
second derivative with central differences of the gradient, the step chosen per direction
and kink crossings refused: a mismatch that raised nothing is a break of kind ``"silent"``.
When no direction can decide, the report says so, with why: that is not a pass.

Every call restores the model's buffers (BatchNorm statistics, spectral norm's ``u`` and
``v``) and draws the same random numbers. To say where, each submodule's arguments are
recorded as the call found them (only the tensors that were differentiated become leaves;
masks keep their ``requires_grad``, caches are copied), and each submodule is checked the same
way on them. A break is reported in the innermost submodules that break on their own, by their
dotted path (``layers.1.self_attn``; ``""`` is the model itself), with what was found there.

The sub-package is laid out by role: ``calls`` (calling the model the same way every
time, recording its submodules' calls), ``penalty`` (the penalty and the
second-derivative comparison), ``locate`` (where, and what), ``functions``
(:func:`~double_backward.check` on a located custom Function's recorded arguments, to name
the cause), ``report`` (the report) and this module, ``check``; the fixes (``FIXES``) are
in ``checker.shared.fixes``, beside what the two checkers share. torch only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ...distributed.wrapped import wrapped_model_message
from ..shared.fixes import BUILTINS_PAGE, BUILTINS_TABLE, fix_for
from ..shared.fixes import FIXES as _FIXES
from .calls import (
    Cast,
    EmbeddingOutput,
    HeldPowerIterations,
    State,
    closed_modules,
    closed_tensors,
    describe_counts,
    input_embeddings,
    map_tensors,
    named_modules,
    power_iterations,
    recording,
    spectral_norm_note,
    tensors,
)
from .locate import locate
from .penalty import PENALTIES, WRT, NotDifferentiable, Outcome, Target, check
from .report import Break, ModelReport

#: The fix for each built-in whose double backward raises, keyed by the ATen operator an error
#: names (its ``_backward`` stripped), by the op's OpInfo name, or by ``nn.<module type>``
#: (defined in ``double_backward.checker.shared.fixes``). The built-ins table on the site and
#: :func:`~double_backward.check_model` both read it.
FIXES = _FIXES

_UNDECIDED_ADVICE = (
    "try other inputs (a point where no ReLU, max or sort input sits exactly on a tie or at "
    "0: a zero-initialised layer puts it there), the model in float64, or a smaller batch"
)


def _model_name(model: Callable[..., Any]) -> str:
    return (
        type(model).__name__
        if isinstance(model, nn.Module)
        else getattr(model, "__qualname__", type(model).__name__)
    )


def _validate(model: Any, kwargs: Any, wrt: Any, parameters: Any) -> None:
    if not callable(model):
        raise TypeError(
            "check_model: 'model' must be an nn.Module or a callable, got "
            f"{type(model).__name__}"
        )
    if wrt is not None and (not isinstance(wrt, str) or wrt not in WRT):
        raise ValueError(
            f"check_model: wrt must be one of {', '.join(map(repr, WRT))} (or None, the "
            "default: 'inputs', or 'parameters' when no input is floating point), "
            f"got {wrt!r}"
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(
            "check_model: kwargs must be a dict of keyword inputs "
            f"(kwargs={{'attention_mask': mask}}), got {type(kwargs).__name__}"
        )
    if parameters is not None and (
        isinstance(parameters, torch.Tensor)
        or not all(isinstance(p, torch.Tensor) for p in parameters)
    ):
        raise TypeError(
            "check_model: parameters must be an iterable of tensors "
            "(parameters=model.parameters())"
        )


class _Copy:
    """The model in one dtype (None: its own), and how to undo it: a deep copy of an
    ``nn.Module``; a callable's modules and ``parameters=`` cast in place, put back after."""

    def __init__(self, model: Any, modules: dict[str, nn.Module],
                 loose: list[torch.Tensor], dtype: torch.dtype | None) -> None:  # fmt: skip
        self.cast: Cast | None = None
        self.hooks: list[EmbeddingOutput] = []  # wrt="embeddings": taken off by undo()
        if isinstance(model, nn.Module):
            copied = _deepcopy(model)
            self.fn: Callable[..., Any] = (
                copied.to(dtype) if dtype is not None else copied
            )
            self.modules = [self.fn]
            self.parameters = [
                p
                for p in self.fn.parameters()
                if p.requires_grad and p.is_floating_point()
            ]
            self.held = HeldPowerIterations(named_modules(self.fn))
            return
        self.fn, self.modules = model, list(modules.values())
        self.state = State(
            self.modules
        )  # the user's own modules: their buffers put back
        if dtype is not None:
            self.cast = Cast(self.modules, dtype, loose)
        found = {id(p): p for m in self.modules for p in m.parameters()}
        found.update({id(p): p for p in loose})
        self.parameters = [
            p for p in found.values() if p.requires_grad and p.is_floating_point()
        ]
        self.held = HeldPowerIterations(named_modules(model))

    def undo(self) -> None:
        self.held.undo()
        for hooks in self.hooks:
            hooks.remove()
        if self.cast is not None:
            self.cast.undo()
        if hasattr(
            self, "state"
        ):  # values of buffers a cast leaves in place (integers)
            self.state.restore()


def _deepcopy(model: nn.Module) -> nn.Module:
    # The weight a spectral_norm or weight_norm pre-hook recomputed at the last forward is a
    # non-leaf, which deepcopy refuses; the copy's own pre-hook recomputes it at each call.
    memo: dict[int, Any] = {}
    for module in model.modules():
        for hook in getattr(module, "_forward_pre_hooks", {}).values():
            name = getattr(hook, "name", None)
            value = getattr(module, name, None) if isinstance(name, str) else None
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                memo[id(value)] = value.detach().clone()
    try:
        return copy.deepcopy(model, memo)
    except (
        RuntimeError
    ) as error:  # a non-leaf tensor kept as an attribute (spectral_norm)
        raise ValueError(
            "check_model: the model cannot be copied (copy.deepcopy raised "
            f"{type(error).__name__}: {str(error).splitlines()[0]}); pass a callable over it, "
            "`lambda *a: model(*a)`, and it is checked in place and put back"
        ) from error


def check_model(
    model: Callable[..., Any],
    *inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    wrt: str | None = None,
    parameters: Sequence[torch.Tensor] | None = None,
) -> ModelReport:
    """Check that a gradient penalty works through ``model(*inputs, **kwargs)``, and where it
    breaks.

    ``model`` is an ``nn.Module`` or any callable returning tensors (a tuple, a dict, a
    transformers ``ModelOutput``). The inputs differentiated are the floating-point tensors
    among ``inputs`` and ``kwargs`` (only those that require grad, if any does); other inputs
    and the buffers are passed as they are, and listed as skipped. The parameters are the
    model's, those of the ``nn.Module``\\ s a callable closes over (its closure cells,
    defaults, globals, bound ``self``), or ``parameters``. ``wrt`` chooses the penalty:
    ``"inputs"`` (R1, WGAN-GP), ``"parameters"`` (MAML, Hessian-vector products),
    ``"both"``, or ``"embeddings"``. By default (``None``) it is ``"inputs"``, or
    ``"parameters"`` when no input is floating point (a text model given token ids), and the
    report says so.

    ``wrt="embeddings"`` differentiates the output of the model's input embedding: its
    ``get_input_embeddings()`` (transformers), else its first ``nn.Embedding``, with every
    ``nn.Embedding`` sharing that table (T5's encoder and decoder lookups); each call's output
    gets a zero leaf added, the gradient is taken with respect to those leaves, and the
    backward reaches them and the parameters (through the lookup to the table too), as a
    penalty or an adversarial step on ``get_input_embeddings()(input_ids)`` does. An
    ``nn.Module`` is not changed (the checks run on copies); a callable's modules are cast in
    place for the float64 check and put back exactly.
    """
    wrapped = wrapped_model_message(model)
    if wrapped is not None:  # a DDP/FSDP wrapper: its question is check_distributed's
        raise TypeError(f"check_model: {wrapped}")
    _validate(model, kwargs, wrt, parameters)
    given = [t for t in tensors((inputs, kwargs or {})) if t.is_floating_point()]
    if wrt is None:
        wrt = "inputs" if given else "parameters"
    elif wrt == "inputs" and not given:
        raise ValueError(
            "check_model: nothing to differentiate with wrt='inputs': no input is floating "
            f"point ({_dtypes(inputs, kwargs)}: token ids?); pass wrt='parameters' (the "
            "default then: MAML, Hessian-vector products) or wrt='embeddings' (the output "
            "of the model's input embedding: a penalty or adversarial step on the "
            "embeddings)"
        )
    try:
        return _check_model(model, inputs, dict(kwargs or {}), wrt, parameters)
    except NotDifferentiable as error:  # found late, while locating: the user's error
        raise ValueError(f"check_model: {error}{_what_to_pass(model, wrt)}") from error


def _check_model(
    model: Callable[..., Any],
    inputs: tuple,
    kwargs: dict[str, Any],
    wrt: str,
    parameters: Sequence[torch.Tensor] | None,
) -> ModelReport:
    loose = list(parameters) if parameters is not None else []
    modules = {} if isinstance(model, nn.Module) else closed_modules(model)
    closed = {} if isinstance(model, nn.Module) else closed_tensors(model)
    owned = {id(p) for m in modules.values() for p in [*m.parameters(), *m.buffers()]}
    closed = {name: t for name, t in closed.items() if id(t) not in owned}
    loose += [t for t in closed.values() if all(t is not p for p in loose)]
    report = ModelReport(_model_name(model), penalty=PENALTIES[wrt], wrt=wrt)
    given = tensors((inputs, kwargs))
    floats = [t for t in given if t.is_floating_point()]
    chosen = [t for t in floats if t.requires_grad] or floats
    if wrt == "embeddings":  # the embedding's outputs are differentiated, not these
        chosen = []
    embedding = None
    if wrt == "embeddings":
        embedding = [name for name, _ in input_embeddings(model)]
        if not embedding:
            raise ValueError(
                "check_model: wrt='embeddings': the model has no input embedding (no "
                "get_input_embeddings() and no nn.Embedding among its submodules"
                + ("" if isinstance(model, nn.Module) else
                   " or those of the modules the callable closes over")
                + "); pass the embeddings as a floating-point input (inputs_embeds=...) "
                "and wrt='inputs'"
            )  # fmt: skip
    elif wrt == "parameters" and not floats:
        report.checked.append(
            f"no input is floating point ({_dtypes(inputs, kwargs)}: token ids?): the "
            "penalty is taken with respect to the parameters (wrt='parameters'); "
            "wrt='embeddings' takes it with respect to the output of the input embedding"
        )
    _note_skipped(report, model, modules, closed, given, chosen, inputs, loose, wrt)
    held = power_iterations(named_modules(model))
    if held:
        report.checked.append(spectral_norm_note([name for name, _ in held]))
    device = (given or [p for m in modules.values() for p in m.parameters()] or
              (list(model.parameters()) if isinstance(model, nn.Module) else []) or
              [torch.empty(0, device="cpu")])[0].device  # fmt: skip

    # In the model's own dtypes, where the kernels it trains with are chosen.
    outcome, target = _run(
        model, modules, loose, inputs, kwargs, chosen, wrt, device, report, embedding,
        wide=False,
    )  # fmt: skip
    what = (
        f"{len(target.inputs)} input(s)" if embedding is None else
        f"{len(target.inputs)} output(s) of the input embedding "
        f"({', '.join(target.embedded)})"
    )  # fmt: skip
    report.checked.append(
        f"the penalty with respect to {_count(target.first, 'tensor')} "
        f"({what}, {len(target.parameters)} parameter tensor(s)), in the model's dtypes"
    )
    second = False
    if outcome.kind is None:
        # In float64, where central differences are accurate enough to compare with.
        outcome, target = _run(
            model,
            modules,
            loose,
            inputs,
            kwargs,
            chosen,
            wrt,
            device,
            report,
            embedding,
            wide=True,
        )
        second = True
    if outcome.kind == "undecided":
        report.undecided = f"{outcome.message}. {_UNDECIDED_ADVICE}"
        return report
    if outcome.kind is None:
        return report
    copied = _Copy(model, modules, loose, torch.float64 if second else None)
    try:
        whole = _target(copied, *_leaves(inputs, kwargs, chosen, torch.float64
                                         if second else None),
                        wrt, device, second, embedding)  # fmt: skip
        with recording(copied.fn) as calls:
            whole.outputs()
        dtype = torch.float32 if whole.widen and whole.widen.islands else torch.float64

        def make(module: nn.Module, args: tuple, kw: dict) -> Target:
            leaves = [t for t in tensors((args, kw)) if t.requires_grad]
            own = [
                p
                for p in module.parameters()
                if p.requires_grad and p.is_floating_point()
            ]
            return Target(
                module, args, kw, leaves, own, whole.wrt, whole.state, device, second,
                squared=True,
            )  # fmt: skip

        report.breaks.extend(locate(calls, outcome, whole, make, second, dtype))
    finally:
        copied.undo()
    return report


def _leaves(inputs: tuple, kwargs: dict, chosen: list[torch.Tensor],
            dtype: torch.dtype | None) -> tuple[tuple, dict, list[torch.Tensor]]:  # fmt: skip
    """The inputs with each chosen tensor replaced by a fresh leaf (cast to ``dtype``); other
    floating tensors cast too, so that the call is in one dtype."""
    chosen_ids = {id(t) for t in chosen}
    leaves: list[torch.Tensor] = []

    def convert(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) in chosen_ids:
            leaf = tensor.detach().to(dtype or tensor.dtype).clone().requires_grad_()
            leaves.append(leaf)
            return leaf
        if dtype is not None and tensor.is_floating_point():
            return tensor.detach().to(dtype)
        return tensor

    args = map_tensors(inputs, convert)
    kw = map_tensors(kwargs, convert)
    return tuple(args), kw, leaves


def _target(copied: _Copy, args: tuple, kw: dict, leaves: list[torch.Tensor], wrt: str,
            device: torch.device, widen: bool, embedding: list[str] | None) -> Target:  # fmt: skip
    """The whole model's :class:`Target`; for ``wrt="embeddings"``, with a zero leaf added to
    each output of the input embedding (made by one probing call), run as ``"inputs"``."""
    state = State(copied.modules)
    if embedding is None:
        return Target(copied.fn, args, kw, leaves, copied.parameters, wrt, state, device,
                      widen=widen)  # fmt: skip
    by_name = dict(named_modules(copied.fn))
    hooks = EmbeddingOutput([(name, by_name[name]) for name in embedding])
    copied.hooks.append(hooks)
    Target(copied.fn, args, kw, [], copied.parameters, "inputs", state, device,
           widen=widen, context=hooks.probing).outputs()  # fmt: skip
    if not hooks.leaves:
        raise NotDifferentiable(
            f"wrt='embeddings': the input embedding ({', '.join(embedding)}) returned no "
            "floating-point tensor in the call (is it called?)"
        )
    target = Target(copied.fn, args, kw, hooks.leaves, copied.parameters, "inputs", state,
                    device, widen=widen, context=hooks.calling,
                    scales=hooks.scales)  # fmt: skip
    target.inputs_name = "the embeddings"
    target.embedded = hooks.called
    return target


def _run(model, modules, loose, inputs, kwargs, chosen, wrt, device, report, embedding,
         *, wide) -> tuple[Outcome, Target]:  # fmt: skip
    """One pass: the penalty, and in float64 (``wide``) the second-derivative comparison."""
    copied = _Copy(model, modules, loose, torch.float64 if wide else None)
    try:
        args, kw, leaves = _leaves(
            inputs, kwargs, chosen, torch.float64 if wide else None
        )
        try:
            target = _target(copied, args, kw, leaves, wrt, device, wide, embedding)
        except NotDifferentiable as error:
            raise ValueError(
                f"check_model: {error}{_what_to_pass(model, wrt)}"
            ) from error
        if not target.first:
            raise ValueError(
                "check_model: nothing to differentiate: "
                + ("no floating-point input" if wrt == "inputs" else
                   "no parameter that requires grad" if wrt == "parameters" else
                   "no floating-point input and no parameter that requires grad")
                + _what_to_pass(model, wrt)
                + ("; wrt='embeddings' differentiates the output of the model's input "
                   "embedding" if wrt != "embeddings" and not _any_floating(inputs, kwargs)
                   else "")
            )  # fmt: skip
        try:
            outcome = check(target, second=False, dtype=torch.float64)
            if wide and outcome.kind is None:
                islands = target.widen.islands if target.widen else {}
                dtype = torch.float32 if islands else torch.float64
                outcome = check(target, second=True, dtype=dtype)
                _note_precision(report, target, dtype)
                if outcome.checked:
                    report.checked.append(
                        "the second derivative against central differences of the "
                        f"gradient, {outcome.checked}"
                    )
        except NotDifferentiable as error:
            if wide and "calling the model raised" in str(error):
                raise ValueError(
                    "check_model: in float64 (the copy it compares with finite "
                    f"differences), {error}: "
                    + (
                        "the model does not run in float64 (a tensor it makes in float32?)"
                        if isinstance(model, nn.Module)
                        else "the callable uses a tensor in another dtype that is not "
                        "among the modules and tensors it closes over: pass it in "
                        "parameters=[...]"
                    )
                ) from error
            raise ValueError(
                f"check_model: {error}{_what_to_pass(model, wrt)}"
            ) from error
    finally:
        copied.undo()
    return outcome, target


def _any_floating(inputs: tuple, kwargs: dict) -> bool:
    return any(t.is_floating_point() for t in tensors((inputs, kwargs)))


def _dtypes(inputs: tuple, kwargs: Mapping[str, Any] | None) -> str:
    """``int64 tensors`` or ``no tensor``: what was passed."""
    found = sorted({str(t.dtype).removeprefix("torch.")
                    for t in tensors((inputs, dict(kwargs or {})))})  # fmt: skip
    return f"{', '.join(found)} tensors" if found else "no tensor"


def _what_to_pass(model: Any, wrt: str) -> str:
    if isinstance(model, nn.Module) or wrt in ("inputs", "embeddings"):
        return ""
    return (
        "; a callable's parameters are those of the nn.Modules it closes over: pass them "
        "as parameters=[...] if it reaches them another way"
    )


def _note_precision(report: ModelReport, target: Target, dtype: torch.dtype) -> None:
    widen = target.widen
    if widen is None:
        return
    if widen.widened:
        report.checked.append(
            "in float64: the model's casts to float32 were widened to float64: "
            + describe_counts(widen.widened)
        )
    if widen.islands:
        report.checked.append(
            "float32 computations remain in the float64 check ("
            + describe_counts(widen.islands)
            + "): the comparison is held to float32's precision"
        )
    elif not widen.widened:
        report.checked.append("in float64 throughout")


def _note_skipped(report, model, modules, closed, given, chosen, inputs, loose, wrt
                  ) -> None:  # fmt: skip
    others = [t for t in given if not t.is_floating_point()]
    if others:
        report.skipped.append(
            f"{len(others)} input tensor(s) that are not floating point "
            f"({', '.join(sorted({str(t.dtype) for t in others}))}): not differentiated"
        )
    kept = [
        t for t in given if t.is_floating_point() and all(t is not c for c in chosen)
    ]
    if kept and wrt == "embeddings":
        report.skipped.append(
            f"{len(kept)} floating-point input(s), passed as they are (wrt='embeddings' "
            "differentiates the input embedding's output)"
        )
    elif kept:
        report.skipped.append(
            f"{len(kept)} floating-point input(s) that do not require grad, while others "
            "do: passed as they are"
        )
    plain = [v for v in inputs if not isinstance(v, (torch.Tensor, tuple, list, dict))]
    if plain:
        report.skipped.append(f"{len(plain)} non-tensor input(s), passed as they are")
    if isinstance(model, nn.Module):
        owners = {"": model}
    else:
        owners = modules
        if modules or closed:
            report.checked.append(
                "the parameters of the modules and tensors the callable closes over: "
                + ", ".join(
                    [f"{name} ({type(m).__name__})" for name, m in modules.items()]
                    + [f"{name} (tensor)" for name in closed]
                )
            )
        elif not loose:
            report.skipped.append(
                "parameters: the callable closes over no nn.Module; pass parameters=[...] "
                "to differentiate the ones it uses"
            )
    for label, owner in owners.items():
        prefix = f"{label}." if label else ""
        buffers = [prefix + name for name, _ in owner.named_buffers()]
        if buffers:
            report.skipped.append(
                "buffers, not differentiated (restored before every call): "
                + _first_names(buffers)
            )
        frozen = [
            prefix + name for name, p in owner.named_parameters() if not p.requires_grad
        ]
        if frozen:
            report.skipped.append(
                f"parameters with requires_grad=False: {_first_names(frozen)}"
            )


def _first_names(names: list[str], shown: int = 6) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _count(items: list, what: str) -> str:
    return f"{len(items)} {what}{'s' if len(items) != 1 else ''}"


__all__ = [
    "BUILTINS_PAGE", "BUILTINS_TABLE", "FIXES", "Break", "ModelReport", "check_model",
    "fix_for",
]  # fmt: skip
