"""Write the table of built-in ops and ``nn`` modules that raise on double backward.

Found by trying, not by reading flags: every op of torch's OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``) is run on its own sample
inputs, in float64 and float32, under a gradient penalty of its squared outputs
(``torch.autograd.grad`` with ``create_graph=True``, then a second backward). OpInfo's
samples are small; the ops whose kernel depends on the size (``cdist``,
``scaled_dot_product_attention``) and the ``nn``
modules readers train are also tried at a small and a large size by the :data:`PROBES` below.
An op that raises in that second step gets a row: the first line of the error, where it
happens, and the fix (from :data:`double_backward.checker.model.FIXES`, the one source the
model checker reads too).

The scan is a product of :mod:`versioned_results` named ``builtins``: :func:`measure` returns
every trial as a cell (``"op | condition | dtype"`` -> the first line of its error, or
``None`` where the penalty ran). It takes minutes, so a build does not repeat it: it reads the
committed ``docs/_data/builtins/torch-<release>.json`` of every tested release
(:func:`versioned_results.committed_or_measured`) and scans only for an installed release
without one. ``nox -s matrix -- 2.14.1`` writes a release's file with the other products'.
The table is written to ``_generated/builtins_table.md``, which ``builtins.md`` includes:
one column per release, the cells that changed between releases, then each op's errors.

Run ``python docs/_ext/builtins_table.py`` to scan the installed torch again and rewrite its
JSON.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import cuda_results
from versioned_results import Measurement, changed_cells, committed_or_measured

NAME = "builtins"  # its files: docs/_data/builtins/torch-<release>.json
DTYPES = ("float64", "float32")
# OpInfo samples tried per op and dtype: the first few say whether the op's double backward
# raises; more only multiply the minutes the scan takes.
SAMPLES_PER_OP = 4
# A trial that exercised no second derivative (an empty input, a gradient without a graph, no
# first derivative) is recorded with this prefix and its reason: not a pass, and not an error.
NOT_MEASURED = "not measured: "


def measured_error(value: str | None) -> bool:
    """Whether a cell's value is an error the penalty raised (not a pass, not unmeasured)."""
    return bool(value) and not value.startswith(NOT_MEASURED)


def not_measured(value: str | None) -> bool:
    return bool(value) and value.startswith(NOT_MEASURED)


@dataclass(frozen=True)
class Trial:
    """One gradient penalty: what ran (``op``, ``condition``) and the error, if any."""

    op: str
    condition: str
    dtype: str
    error: str | None

    @property
    def cell(self) -> str:
        return cell_key(self.op, self.condition, self.dtype)


def cell_key(op: str, condition: str, dtype: str) -> str:
    """A trial's key in the results: ``"cdist | p = 2, 5 rows | float64"``."""
    return f"{op} | {condition} | {dtype}"


def split_cell(cell: str) -> tuple[str, str, str]:
    """``(op, condition, dtype)`` of a cell key (conditions hold no " | ")."""
    op, condition, dtype = cell.split(" | ")
    return op, condition, dtype


def first_line(error: BaseException) -> str:
    """``Type: first line of the message``, as the error index shows it."""
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0].rstrip(',')}"


def _floats(value: object) -> list:
    """The floating-point tensors in ``value`` (a tensor, or nested tuples, lists, dicts)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _floats(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _floats(item)]
    return []


class NotApplicable(Exception):
    """The sample says nothing about double backward (no first derivative, no graph)."""


def gradient_penalty(call: Callable[[], object], wrt: list) -> None:
    """Run what a gradient penalty runs; raise what its second step raises.

    ``call()`` computes outputs from the leaves ``wrt``. The loss squares them, so the
    gradient reaching the op depends on its inputs, as after any nonlinear op downstream: a
    linear op's own backward is then differentiated too. The first backward must work (else
    the op has no first derivative here: :class:`NotApplicable`); then the gradients, taken
    with ``create_graph=True``, are squared, summed and differentiated again.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    if any(t.numel() == 0 for t in wrt):
        # OpInfo's samples include empty tensors; a penalty on them differentiates nothing.
        raise NotApplicable("an input is empty")
    try:
        outputs = [t for t in _floats(call()) if t.requires_grad and t.numel()]
        if not outputs:
            raise NotApplicable("no differentiable output")
        # Fixed random weights, so that a symmetric op does not sum to a constant.
        # Drawn on the CPU, then moved: the same weights on every device.
        weights = [
            torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device)
            for t in outputs
        ]
        scalar = sum((w * t * t).sum() for w, t in zip(weights, outputs, strict=True))
        torch.autograd.grad(scalar, wrt, retain_graph=True, allow_unused=True)
    except NotApplicable:
        raise
    except Exception as error:  # noqa: BLE001 - no first derivative: not this table's case
        raise NotApplicable(first_line(error)) from error
    grads = torch.autograd.grad(scalar, wrt, create_graph=True, allow_unused=True)
    # g * g, not g ** 2: pow has no sparse CSR kernel, and its error would hide the op's own.
    penalty = [(g * g).sum() for g in grads if g is not None and g.requires_grad]
    if not penalty:
        raise NotApplicable("the gradient has no graph (a zero second derivative)")
    torch.autograd.grad(sum(penalty), wrt, allow_unused=True)


def _try(op: str, condition: str, dtype: str, call: Callable[[], object], wrt) -> Trial:
    with warnings.catch_warnings(record=True):
        # Warnings ops raise on their own inputs (deprecations, UserWarnings of odd samples)
        # are recorded and dropped: what this table measures is whether the penalty raises.
        warnings.simplefilter("always")
        try:
            gradient_penalty(call, wrt)
        except NotApplicable as reason:
            return Trial(op, condition, dtype, NOT_MEASURED + str(reason))
        except Exception as error:  # noqa: BLE001 - the error is the measurement
            return Trial(op, condition, dtype, first_line(error))
    return Trial(op, condition, dtype, None)


# -- OpInfo's ops ---------------------------------------------------------------------
def _op_db() -> list:
    import torch  # noqa: F401 - imported before torch.testing, as torch requires

    # torch.testing._internal imports its test utilities (it needs `expecttest`); with torch
    # 2.13 that import warns nothing, so no filter is needed here.
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _opinfo_trials(op_info, dtype_name: str) -> Iterator[Trial]:
    import torch

    dtype = getattr(torch, dtype_name)
    if not op_info.supports_autograd or dtype not in op_info.supported_dtypes("cpu"):
        return
    name = op_info.name + (
        f".{op_info.variant_test_name}" if op_info.variant_test_name else ""
    )
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter(
                "always"
            )  # as in _try: an op's own warnings are not results
            samples = list(op_info.sample_inputs("cpu", dtype, requires_grad=True))
    except Exception:  # noqa: BLE001 - a sample generator that fails here gives no row
        return
    # Numbered, as two samples may have the same shape: each is its own cell.
    for number, sample in enumerate(samples[:SAMPLES_PER_OP], start=1):
        wrt = [
            t for t in _floats([sample.input, sample.args, sample.kwargs])
            if t.requires_grad and t.is_leaf
        ]  # fmt: skip
        if not wrt:
            continue
        shape = tuple(sample.input.shape) if hasattr(sample.input, "shape") else ()
        yield _try(
            name, f"OpInfo sample {number}, input shape {shape}", dtype_name,
            lambda sample=sample: op_info(sample.input, *sample.args, **sample.kwargs), wrt,
        )  # fmt: skip


# -- size- and backend-dependent ops, and nn modules ------------------------------------
def _leaf(*shape, dtype, seed=0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_()


def _cdist(
    rows: int, p: float, compute_mode: str | None = None, rows2: int | None = None
):
    def make(dtype):
        import torch

        kwargs = {"compute_mode": compute_mode} if compute_mode else {}
        x1, x2 = (
            _leaf(rows, 3, dtype=dtype),
            _leaf(rows2 or rows, 3, dtype=dtype, seed=1),
        )
        return lambda: torch.cdist(x1, x2, p=p, **kwargs), [x1, x2]

    return make


def _pdist(rows: int):
    def make(dtype):
        import torch

        x = _leaf(rows, 3, dtype=dtype)
        return lambda: torch.nn.functional.pdist(x), [x]

    return make


def _sdpa(length: int, backend: str | None = None, is_causal: bool = False):
    def make(dtype):
        import contextlib

        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (_leaf(2, 2, length, 8, dtype=dtype, seed=s) for s in range(3))

        def call():
            context = (
                sdpa_kernel(getattr(SDPBackend, backend))
                if backend
                else (contextlib.nullcontext())
            )
            with context:
                return torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=is_causal
                )

        return call, [q, k, v]

    return make


def _embedding_bag(mode: str):
    """With respect to the weight alone, without per_sample_weights, whose derivative is the
    one the OpInfo samples meet first."""

    def make(dtype):
        import torch

        weight = _leaf(10, 4, dtype=dtype)
        indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 3])
        return (
            lambda: torch.nn.functional.embedding_bag(
                indices, weight, offsets, mode=mode
            ),
            [weight],
        )

    return make


def _module(
    build: str,
    length: int,
    train: bool,
    dropout: float = 0.0,
    need_weights: bool = False,
):
    def make(dtype):
        import torch

        torch.manual_seed(0)
        module = eval(build.format(dropout=dropout), {"nn": torch.nn})  # noqa: S307 - ours
        module = module.to(dtype).train(train)
        x = _leaf(2, length, 16, dtype=dtype)
        wrt = [x, *module.parameters()]
        if "MultiheadAttention" in build:
            return lambda: module(x, x, x, need_weights=need_weights)[0], wrt
        return lambda: module(x), wrt

    return make


def _one_input(name: str, shape: tuple[int, ...], **kwargs):
    def make(dtype):
        import torch

        x = _leaf(*shape, dtype=dtype)
        return lambda: getattr(torch.nn.functional, name)(x, **kwargs), [x]

    return make


def _grid_sample(mode: str):
    def make(dtype):
        import torch

        image = _leaf(1, 2, 5, 5, dtype=dtype)
        grid = (_leaf(1, 3, 3, 2, dtype=dtype, seed=1) * 0.5).detach().requires_grad_()
        return (
            lambda: torch.nn.functional.grid_sample(
                image, grid, mode=mode, align_corners=False
            ),
            [image, grid],
        )

    return make


ENCODER_LAYER = (
    "nn.TransformerEncoderLayer(16, 2, 32, dropout={dropout}, batch_first=True)"
)
ATTENTION = "nn.MultiheadAttention(16, 2, dropout={dropout}, batch_first=True)"

# (op, condition, how to make the call and its leaves for a dtype). Small and large sizes:
# cdist's kernel for p = 2 changes at 25 rows; the others are tried at both to show none does.
PROBES = [
    *[("cdist", f"p = 2, {n} rows", _cdist(n, 2.0)) for n in (5, 16, 25, 26, 32)],
    *[("cdist", f"p = {p:g}, {n} rows", _cdist(n, p)) for p in (1.0, 3.0) for n in (5, 32)],
    # The kernel follows the larger input: one of more than 25 rows is enough.
    *[("cdist", f"p = 2, {a} rows against {b}", _cdist(a, 2.0, rows2=b))
      for a, b in ((16, 32), (32, 16))],
    ("cdist", 'p = 2, 5 rows, compute_mode="use_mm_for_euclid_dist"',
     _cdist(5, 2.0, "use_mm_for_euclid_dist")),
    *[("nn.functional.pdist", f"{n} rows", _pdist(n)) for n in (5, 32)],
    *[("nn.functional.scaled_dot_product_attention", f"default CPU kernel, L = {n}",
       _sdpa(n)) for n in (4, 256)],
    ("nn.functional.scaled_dot_product_attention", "default CPU kernel, is_causal=True",
     _sdpa(16, is_causal=True)),
    *[("nn.functional.scaled_dot_product_attention", f"sdpa_kernel(SDPBackend.MATH), L = {n}",
       _sdpa(n, "MATH")) for n in (4, 256)],
    *[(f"nn.TransformerEncoderLayer ({mode})", f"{mode} mode, dropout=0, sequence of {n}",
       _module(ENCODER_LAYER, n, mode == "train"))
      for mode in ("train", "eval") for n in (4, 128)],
    # With dropout in train mode, attention runs on the MATH kernel (the CPU flash kernel
    # takes no dropout), so the layer's default passes in training and raises in eval.
    *[("nn.TransformerEncoderLayer (train)", f"train mode, dropout=0.1, sequence of {n}",
       _module(ENCODER_LAYER, n, True, 0.1)) for n in (4, 128)],
    *[("nn.MultiheadAttention", f"need_weights=False, {mode} mode, sequence of {n}",
       _module(ATTENTION, n, mode == "train")) for mode in ("train", "eval") for n in (4, 128)],
    # need_weights=True (the module's default) computes the softmax itself: no sdpa kernel.
    *[("nn.MultiheadAttention", f"need_weights=True (the default), {mode} mode, sequence of 4",
       _module(ATTENTION, 4, mode == "train", need_weights=True)) for mode in ("train", "eval")],
    *[("nn.functional.embedding_bag", f"with respect to weight only, mode={mode!r}",
       _embedding_bag(mode)) for mode in ("sum", "mean", "max")],
    # Ops readers ask about by name, on non-empty inputs (OpInfo's unfold samples are empty).
    ("nn.functional.unfold", "kernel 2, input (1, 2, 4, 4)",
     _one_input("unfold", (1, 2, 4, 4), kernel_size=2)),
    ("nn.functional.fold", "kernel 2, output 3 x 3, input (1, 8, 4)",
     _one_input("fold", (1, 8, 4), output_size=(3, 3), kernel_size=2)),
    ("nn.functional.max_pool2d", "kernel 2, input (1, 2, 4, 4)",
     _one_input("max_pool2d", (1, 2, 4, 4), kernel_size=2)),
    *[("nn.functional.grid_sample", f"mode={mode!r}, with respect to input and grid",
       _grid_sample(mode)) for mode in ("bilinear", "nearest", "bicubic")],
]  # fmt: skip

# Ops readers look for by name: the page lists each with its result, whether it raises or not.
ASKED_ABOUT = {
    "grid_sample": ("nn.functional.grid_sample", "grid_sampler_2d", "grid_sampler_3d"),
    "unfold and fold (im2col, col2im)": ("nn.functional.unfold", "nn.functional.fold"),
    "max pooling": (
        "nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d",
        "nn.functional.adaptive_max_pool2d", "max_pool2d_with_indices_backward",
    ),
}  # fmt: skip


def _probe_trials(dtype_name: str) -> Iterator[Trial]:
    import torch

    for op, condition, make in PROBES:
        call, wrt = make(getattr(torch, dtype_name))
        yield _try(op, condition, dtype_name, call, wrt)


def measure(progress: Callable[[str], None] = lambda _: None) -> tuple[dict, dict]:
    """Every trial with the installed torch: ``(results, about)`` for
    :mod:`versioned_results`. ``results``: cell -> the first line of its error, ``None``
    where the penalty ran (passes are kept: a later release raising there is a change);
    ``about``: how many ops and trials, and the seconds the scan took."""
    started = time.perf_counter()
    trials: list[Trial] = []
    for dtype_name in DTYPES:
        trials += _probe_trials(dtype_name)
    op_db = _op_db()
    for number, op_info in enumerate(op_db):
        if number % 100 == 0:
            progress(f"op {number} of {len(op_db)}")
        for dtype_name in DTYPES:
            trials += _opinfo_trials(op_info, dtype_name)
    results = {trial.cell: trial.error for trial in trials}
    if len(results) != len(trials):
        raise AssertionError("builtins_table: two trials share a cell key")
    about = {
        "ops_tried": len({trial.op for trial in trials}),
        "trials": len(trials),
        "not_measured": sum(1 for trial in trials if not_measured(trial.error)),
        "seconds": round(time.perf_counter() - started),
    }
    return results, about


# -- rendering ----------------------------------------------------------------------------
def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def _conditions(trials: list[dict]) -> list[str]:
    """Each condition once, with the dtypes it held in (``float64, float32`` when both)."""
    dtypes: dict[str, list[str]] = {}
    opinfo: dict[str, int] = {}
    for trial in trials:
        if trial["condition"].startswith("OpInfo"):
            opinfo[trial["dtype"]] = opinfo.get(trial["dtype"], 0) + 1
        else:
            dtypes.setdefault(trial["condition"], []).append(trial["dtype"])
    shown = [f"{condition} ({', '.join(d)})" for condition, d in dtypes.items()]
    if opinfo:
        counts = ", ".join(f"{n} in {dtype}" for dtype, n in opinfo.items())
        shown.append(f"OpInfo samples: {counts}")
    return shown


def _index_titles() -> dict[str, str]:
    """Error index title by message, for the messages the index raises itself."""
    from error_index import raised_messages

    return {message: title for title, message in raised_messages().items()}


def _slug(title: str) -> str:
    from myst_parser.slugs import github_slugify

    return github_slugify(title)


NO_FIX = (
    "No switch in torch: compute it with ops that have a double backward, or in a Function "
    "whose backward does ({doc}`auto_examples/tutorial/plot_04_untracked_backward`)"
)


def _trials(measurement: Measurement, op: str) -> list[dict]:
    """The trials of ``op`` in one release, as dicts (op, condition, dtype, error), in the
    order the scan runs them (the JSON keeps its cells sorted as text: "16 rows" before "5")."""
    trials = []
    for cell, error in measurement.results.items():
        trial_op, condition, dtype = split_cell(cell)
        if trial_op == op:
            trials.append(
                {"op": op, "condition": condition, "dtype": dtype, "error": error}
            )
    return sorted(trials, key=_scan_order)


def _scan_order(trial: dict) -> tuple:
    probes = [(op, condition) for op, condition, _ in PROBES]
    probe = (trial["op"], trial["condition"])
    dtype = trial["dtype"]
    return (
        probes.index(probe) if probe in probes else len(probes),
        trial["condition"],
        DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES),
    )


def _failing_ops(measurement: Measurement) -> set[str]:
    return {
        split_cell(cell)[0]
        for cell, error in measurement.results.items()
        if measured_error(error)
    }


def tells_unmeasured_apart(measurement: Measurement) -> bool:
    """Whether a release's file records trials that differentiated nothing as such (files
    written before issue 42 recorded them as passes, ``None``)."""
    return "not_measured" in measurement.about


def _summary(trials: list[dict], tells_apart: bool = True) -> str:
    """An op's cell in one release's column: how many of its trials raised, passed, or
    measured nothing (only a trial that differentiated twice on a non-empty input counts).
    For a file that does not tell them apart, a trial without error is not called a pass."""
    if not trials:
        return "not tried"
    if not tells_apart:
        raised = sum(1 for trial in trials if measured_error(trial["error"]))
        quiet = len(trials) - raised
        head = f"raised in {raised} of {len(trials)} trials; " if raised else ""
        return (
            f"{head}no error in {quiet} trial{'' if quiet == 1 else 's'}, not told apart "
            "from trials that differentiated nothing"
        )
    raised = sum(1 for trial in trials if measured_error(trial["error"]))
    unmeasured = sum(1 for trial in trials if not_measured(trial["error"]))
    measured = len(trials) - unmeasured
    if not measured:
        return f"not measured ({unmeasured} trials, none differentiated twice)"
    tail = f"; {unmeasured} not measured" if unmeasured else ""
    if raised:
        return f"raised in {raised} of {measured} measured trials{tail}"
    return f"passed {measured} of {measured} measured trials{tail}"


def _where_measured(torch: str, measurement: Measurement) -> str:
    about = measurement.about
    counts = (
        f", {about['trials']} gradient penalties over {about['ops_tried']} ops in "
        f"{about['seconds']} s"
        if {"trials", "ops_tried", "seconds"} <= about.keys()
        else ""
    )
    unmeasured = (
        f", {about['not_measured']} of them not measured (they differentiated nothing)"
        if "not_measured" in about
        else " (this file predates telling a trial that differentiated nothing from a "
        "pass: its passes may include such trials)"
    )
    return (
        f"torch {torch}: measured {measurement.measured}{counts}{unmeasured}; "
        f"{len(_failing_ops(measurement))} ops raised"
    )


def _op_block(trials: list[dict], titles: dict[str, str]) -> list[str]:
    """One release's errors of an op, each with where it raised, then where it passed."""
    lines = []
    errors = {trial["error"] for trial in trials if measured_error(trial["error"])}
    for error in sorted(errors):
        raises = _conditions([trial for trial in trials if trial["error"] == error])
        index = (
            f" Error index: [{titles[error]}](project:errors.md#{_slug(titles[error])})."
            if error in titles else ""
        )  # fmt: skip
        lines += [
            f"```text\n{error}\n```",
            "",
            f"- **Raises:** {'; '.join(raises)}.{index}",
        ]
    passes = _conditions([trial for trial in trials if not trial["error"]])
    lines.append(f"- **Passes:** {'; '.join(passes) or 'no other condition tried'}.")
    for reason in sorted({t["error"] for t in trials if not_measured(t["error"])}):
        where = _conditions([trial for trial in trials if trial["error"] == reason])
        lines.append(
            f"- **Not measured** ({reason.removeprefix(NOT_MEASURED)}): {'; '.join(where)}."
        )
    return lines


def render(
    measurements: dict[str, Measurement],
    fixes: dict[str, str],
    titles: dict[str, str],
    cuda: dict | None = None,
) -> str:
    """The table (each op: how often it raised in each torch release on the CPU, and on CUDA
    in the committed ``cuda`` file, and its fix), the trials that changed between releases,
    then each op's errors and conditions."""
    releases = list(measurements)
    ops = sorted(set().union(*(_failing_ops(m) for m in measurements.values())))
    about_cuda = [cuda_results.about_text(cuda), ""] if cuda else []
    # A CUDA column only from a run of the probes: a file without one holds no trial.
    cuda = cuda if cuda and cuda["results"] else None
    cuda_trials = cuda_results.by_op(cuda) if cuda else {}
    # The CUDA kernels that raise where no CPU kernel does: rows of their own.
    cuda_only = sorted(
        op for op, trials in cuda_trials.items()
        if op not in ops and any(error for *_, error in trials)
    )  # fmt: skip
    cuda_header = f" | CUDA ({cuda_results.label(cuda)})" if cuda else ""
    lines = [
        "On the CPU. "
        + ". ".join(_where_measured(torch, m) for torch, m in measurements.items())
        + ". A release's column counts the op's trials that raised there.",
        "",
        *about_cuda,
        "| Op (its error and conditions below) | "
        + " | ".join(f"torch {torch}" for torch in releases)
        + cuda_header
        + " | Fix |",
        "|---" * (len(releases) + 2 + bool(cuda)) + "|",
    ]
    sections = []
    for number, op in enumerate(ops, start=1):
        fix = fixes[op].replace("|", "\\|") if op in fixes else NO_FIX
        by_release = {torch: _trials(m, op) for torch, m in measurements.items()}
        counts = " | ".join(
            _summary(trials, tells_unmeasured_apart(measurements[torch]))
            for torch, trials in by_release.items()
        )
        if cuda:
            trials = cuda_trials.get(op)
            counts += " | " + (
                cuda_results.summary(trials)
                if trials
                else cuda_results.cpu_op_cell(cuda)
            ).replace("|", "\\|")
            cuda_fix = cuda_results.fix(op, trials, fixes, NO_FIX) if trials else ""
            cuda_fix = cuda_fix.replace("|", "\\|")
            if cuda_fix.startswith(fix):  # the CUDA fix extends the CPU one
                fix = cuda_fix
            elif cuda_fix and cuda_fix not in fix:
                fix += " On CUDA: " + cuda_fix
        lines.append(f"| [`{op}`](#builtin-{number}) | {counts} | {fix} |")
        sections += ["", f"(builtin-{number})=", f"### `{op}`", ""]
        blocks: dict[str, list[str]] = {}  # a block -> the releases that show it
        for torch, trials in by_release.items():
            block = "\n".join(_op_block(trials, titles)) if trials else "Not tried."
            blocks.setdefault(block, []).append(torch)
        for block, torches in blocks.items():
            if len(releases) > 1:
                sections += [f"**torch {' and '.join(torches)}:**", ""]
            sections += [block, ""]
        sections.append(f"- **Fix:** {fix}.")
    not_on_cpu = "not run (a CUDA kernel)"
    for number, op in enumerate(cuda_only, start=len(ops) + 1):
        trials = cuda_trials[op]
        fix = cuda_results.fix(op, trials, fixes, NO_FIX).replace("|", "\\|")
        cells = " | ".join(
            [not_on_cpu] * len(releases) + [cuda_results.summary(trials)]
        )
        lines.append(f"| [`{op}`](#builtin-{number}) | {cells} | {fix} |")
        sections += ["", f"(builtin-{number})=", f"### `{op}` (CUDA)", ""]
        for message in sorted({error for *_, error in trials if error}):
            raises = [f"{c} ({d})" for c, d, e in trials if e == message]
            sections += [
                f"```text\n{message}\n```",
                "",
                f"- **Raises:** {'; '.join(raises)}.",
            ]
        passes = [f"{c} ({d})" for c, d, e in trials if not e]
        sections += [f"- **Passes:** {'; '.join(passes) or 'no other condition tried'}.",
                     f"- **Fix:** {fix}.", ""]  # fmt: skip
    if cuda:
        works = [op for op, trials in cuda_trials.items()
                 if op not in ops and not any(error for *_, error in trials)]  # fmt: skip
        lines += ["", "Passed on CUDA: " + ", ".join(f"`{op}`" for op in works) + "."]
    return (
        "\n".join([*lines, "", *_asked_about(measurements, ops), "",
                   *_changes(measurements), "",
                   "## Each op: the error, where it raises", *sections])
        + "\n"
    )  # fmt: skip


def _asked_about(measurements: dict[str, Measurement], failing: list[str]) -> list[str]:
    """The ops readers look for by name, each with its result in every release, whether it
    raised or not; a raising one links to its section below."""
    releases = list(measurements)
    lines = [
        "## Ops readers ask about",
        "",
        "Listed whether they raise or not, with the release each result was measured on.",
        "",
        "| Asked about | Op | " + " | ".join(f"torch {tv}" for tv in releases) + " |",
        "|---" * (len(releases) + 2) + "|",
    ]
    for asked, ops in ASKED_ABOUT.items():
        for op in ops:
            name = (
                f"[`{op}`](#builtin-{failing.index(op) + 1})"
                if op in failing
                else f"`{op}`"
            )
            cells = " | ".join(
                _summary(_trials(m, op), tells_unmeasured_apart(m)).replace("|", "\\|")
                for m in measurements.values()
            )
            lines.append(f"| {asked} | {name} | {cells} |")
    return lines


def _changes(measurements: dict[str, Measurement]) -> list[str]:
    """The trials whose result differs between the releases that ran them."""
    lines = ["## What changed between torch releases", ""]
    if len(measurements) == 1:
        return [*lines, "One torch release measured: nothing to compare."]
    changed = {
        cell: values
        for cell, values in changed_cells(measurements).items()
        if len({None if not_measured(v) else v for v in values.values()}) > 1
    }
    cells = [set(m.results) for m in measurements.values()]
    in_some = set().union(*cells) - set.intersection(*cells)
    if changed:
        lines += [f"{len(changed)} trials differ, by op and change:", ""]
        # (op, each release's result) -> the trials that changed so
        groups: dict[tuple, list[dict]] = {}
        for cell, values in changed.items():
            op, condition, dtype = split_cell(cell)
            trial = {"op": op, "condition": condition, "dtype": dtype, "error": None}
            groups.setdefault((op, tuple(values.items())), []).append(trial)
        for (op, values), trials in sorted(groups.items()):
            shown = "; ".join(
                f"torch {torch}: " + (f"`{_escape(error)}`" if error else "passes")
                for torch, error in values
            )
            where = "; ".join(_conditions(sorted(trials, key=_scan_order)))
            lines.append(f"- `{op}`, {where}. {shown}.")
    else:
        lines.append(
            "No trial run in every release differs between torch "
            + " and ".join(measurements) + "."
        )  # fmt: skip
    if in_some:
        lines += [
            "",
            f"{len(in_some)} trials ran in some releases only (OpInfo's ops and sample "
            "inputs differ between releases, or a trial was added since a measurement) "
            "and are not compared.",
        ]
    return lines


def _write_table(app) -> None:
    # Reading the committed files is instant; scanning (only for an installed torch without
    # a committed file) takes minutes, and says so.
    from source_digest import digest, regenerate
    from sphinx.util import logging
    from versioned_results import committed_files

    logger = logging.getLogger(__name__)
    path = Path(app.srcdir) / "_generated" / "builtins_table.md"
    extension_dir = Path(__file__).parent
    key = digest(
        Path(__file__), extension_dir / "error_index.py",
        extension_dir / "versioned_results.py", *committed_files(NAME),
        extension_dir / "cuda_results.py", *sorted(cuda_results.DATA_DIR.glob("*.json")),
        salt=version("torch"),
    )  # fmt: skip

    def make() -> str:
        from double_backward.checker.model import FIXES

        measurements = committed_or_measured(
            NAME, lambda: measure(lambda text: logger.info("built-ins: %s", text))
        )
        committed_cuda = cuda_results.load()
        cuda = committed_cuda[-1] if committed_cuda else None
        return render(measurements, FIXES, _index_titles(), cuda)

    regenerate(path, key, make)


def setup(app) -> dict[str, object]:
    app.connect("builder-inited", _write_table)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # scan the installed torch again and rewrite its file
    from versioned_results import write

    results, about = measure(lambda text: print(text, file=sys.stderr))
    written = write(NAME, results, about=about)
    raised = sum(1 for error in results.values() if measured_error(error))
    print(
        f"{raised} failing trials of {about['trials']} ({about['not_measured']} not "
        f"measured) in {about['seconds']} s: {written}"
    )
