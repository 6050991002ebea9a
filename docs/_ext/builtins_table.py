"""Write the table of built-in ops and ``nn`` modules that raise on double backward.

Found by trying, not by reading flags: every op of torch's OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``) is run on its own sample
inputs, in float64 and float32, under a gradient penalty (``torch.autograd.grad`` with
``create_graph=True``, then a second backward). OpInfo's samples are small; the ops whose
kernel depends on the size (``cdist``, ``scaled_dot_product_attention``) and the ``nn``
modules readers train are also tried at a small and a large size by the :data:`PROBES` below.
An op that raises in that second step gets a row: the first line of the error, where it
happens, and the fix (from :data:`double_backward.model_check.FIXES`, the one source the
model checker reads too).

The scan takes minutes, so its result is kept as JSON, one file per torch version, with the
version and the date inside (``docs/_data/builtins/torch-<version>.json``, committed). A build
reads the file for the installed torch; only when there is none does it scan, and write it.
The table is written to ``_generated/builtins_table.md``, which ``builtins.md`` includes.

Run ``python docs/_ext/builtins_table.py`` to scan again and rewrite the JSON.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

DATA_DIR = Path(__file__).parent.parent / "_data" / "builtins"
DTYPES = ("float64", "float32")
# OpInfo samples tried per op and dtype: the first few say whether the op's double backward
# raises; more only multiply the minutes the scan takes.
SAMPLES_PER_OP = 4
FORMAT = 1  # bump when the JSON's layout changes, so an old file is scanned again


@dataclass(frozen=True)
class Trial:
    """One gradient penalty: what ran (``op``, ``condition``) and the error, if any."""

    op: str
    condition: str
    dtype: str
    error: str | None


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

    ``call()`` computes outputs from the leaves ``wrt``. The first backward must work (else
    the op has no first derivative here: :class:`NotApplicable`); then the gradients, taken
    with ``create_graph=True``, are squared, summed and differentiated again.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    try:
        outputs = [t for t in _floats(call()) if t.requires_grad and t.numel()]
        if not outputs:
            raise NotApplicable("no differentiable output")
        # Fixed random weights, so that a symmetric op does not sum to a constant.
        weights = [
            torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in outputs
        ]
        scalar = sum((w * t).sum() for w, t in zip(weights, outputs, strict=True))
        torch.autograd.grad(scalar, wrt, retain_graph=True, allow_unused=True)
    except NotApplicable:
        raise
    except Exception as error:  # noqa: BLE001 - no first derivative: not this table's case
        raise NotApplicable(first_line(error)) from error
    grads = torch.autograd.grad(scalar, wrt, create_graph=True, allow_unused=True)
    penalty = [(g**2).sum() for g in grads if g is not None and g.requires_grad]
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
        except NotApplicable:
            return Trial(op, condition, dtype, None)
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
    for sample in samples[:SAMPLES_PER_OP]:
        wrt = [
            t for t in _floats([sample.input, sample.args, sample.kwargs])
            if t.requires_grad and t.is_leaf
        ]  # fmt: skip
        if not wrt:
            continue
        shape = tuple(sample.input.shape) if hasattr(sample.input, "shape") else ()
        yield _try(
            name, f"OpInfo sample, input shape {shape}", dtype_name,
            lambda sample=sample: op_info(sample.input, *sample.args, **sample.kwargs), wrt,
        )  # fmt: skip


# -- size- and backend-dependent ops, and nn modules ------------------------------------
def _leaf(*shape, dtype, seed=0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_()


def _cdist(rows: int, p: float, compute_mode: str | None = None):
    def make(dtype):
        import torch

        kwargs = {"compute_mode": compute_mode} if compute_mode else {}
        x1, x2 = _leaf(rows, 3, dtype=dtype), _leaf(rows, 3, dtype=dtype, seed=1)
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


def _module(build: str, length: int, train: bool, dropout: float = 0.0):
    def make(dtype):
        import torch

        torch.manual_seed(0)
        module = eval(build.format(dropout=dropout), {"nn": torch.nn})  # noqa: S307 - ours
        module = module.to(dtype).train(train)
        x = _leaf(2, length, 16, dtype=dtype)
        wrt = [x, *module.parameters()]
        if "MultiheadAttention" in build:
            return lambda: module(x, x, x, need_weights=False)[0], wrt
        return lambda: module(x), wrt

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
]  # fmt: skip


def _probe_trials(dtype_name: str) -> Iterator[Trial]:
    import torch

    for op, condition, make in PROBES:
        call, wrt = make(getattr(torch, dtype_name))
        yield _try(op, condition, dtype_name, call, wrt)


def scan(progress: Callable[[str], None] = lambda _: None) -> dict:
    """Every trial's result, as the JSON the cache keeps."""
    import torch

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
    failing_ops = {trial.op for trial in trials if trial.error}
    return {
        "format": FORMAT,
        "torch": torch_version(),
        "torch_build": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "machine": "CPU only",
        "ops_tried": len({trial.op for trial in trials}),
        "trials": len(trials),
        "seconds": round(time.perf_counter() - started),
        # Every trial of the ops that raised at least once: the passes show the other side of
        # the condition. ``error`` is null where the penalty ran.
        "trials_of_failing_ops": [
            trial.__dict__ for trial in trials if trial.op in failing_ops
        ],
    }


def torch_version() -> str:
    """The installed torch's public version (``2.13.0``; the scan runs on the CPU only)."""
    return version("torch").split("+")[0]


def cache_path(torch_version: str) -> Path:
    return DATA_DIR / f"torch-{torch_version}.json"


def load_or_scan(torch_version: str, progress: Callable[[str], None]) -> dict:
    """The cached scan for ``torch_version``, made (and written) when missing or stale."""
    path = cache_path(torch_version)
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") == FORMAT and data.get("torch") == torch_version:
            return data
    data = scan(progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return data


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
    from error_index import captured_messages

    return {message: title for title, message in captured_messages()}


def _slug(title: str) -> str:
    from myst_parser.slugs import github_slugify

    return github_slugify(title)


NO_FIX = (
    "No switch in torch: compute it with ops that have a double backward, or in a Function "
    "whose backward does ({doc}`auto_examples/plot_04_untracked_backward`)"
)


def render(data: dict, fixes: dict[str, str], titles: dict[str, str]) -> str:
    """The table (each op and its fix), then each op's error and conditions, in a section."""
    trials = data["trials_of_failing_ops"]
    ops = sorted({trial["op"] for trial in trials})
    lines = [
        f"Measured with torch {data['torch']} on {data['date']} ({data['machine']}): "
        f"{data['trials']} gradient penalties over {data['ops_tried']} ops, in "
        f"{data['seconds']} s; {len(ops)} ops raised.",
        "",
        "| Op (its error and conditions below) | Fix |",
        "|---|---|",
    ]
    sections = []
    for number, op in enumerate(ops, start=1):
        mine = [trial for trial in trials if trial["op"] == op]
        fix = fixes[op].replace("|", "\\|") if op in fixes else NO_FIX
        errors = sorted({trial["error"] for trial in mine if trial["error"]})
        lines.append(f"| [`{op}`](#builtin-{number}) | {fix} |")
        passes = _conditions([trial for trial in mine if not trial["error"]])
        sections += ["", f"(builtin-{number})=", f"### `{op}`", ""]
        for error in errors:
            raises = _conditions([trial for trial in mine if trial["error"] == error])
            index = (
                f" Error index: [{titles[error]}](project:errors.md#{_slug(titles[error])})."
                if error in titles else ""
            )  # fmt: skip
            sections += [
                f"```text\n{error}\n```",
                "",
                f"- **Raises:** {'; '.join(raises)}.{index}",
            ]
        sections += [
            f"- **Passes:** {'; '.join(passes) or 'no other condition tried'}.",
            f"- **Fix:** {fix}.",
        ]
    return (
        "\n".join([*lines, "", "## Each op: the error, where it raises", *sections])
        + "\n"
    )


def _write_table(app) -> None:
    # Reading the cache is instant; scanning (only for a torch without a committed file)
    # takes minutes, and says so.
    from source_digest import digest, regenerate
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    path = Path(app.srcdir) / "_generated" / "builtins_table.md"
    cache = cache_path(torch_version())
    extension_dir = Path(__file__).parent
    key = digest(
        Path(__file__), extension_dir / "error_index.py",
        *([cache] if cache.exists() else []), salt=version("torch"),
    )  # fmt: skip

    def make() -> str:
        from double_backward.model_check import FIXES

        data = load_or_scan(
            torch_version(), lambda text: logger.info("built-ins: %s", text)
        )
        return render(data, FIXES, _index_titles())

    regenerate(path, key, make)


def setup(app) -> dict[str, object]:
    app.connect("builder-inited", _write_table)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    path = cache_path(torch_version())
    path.unlink(missing_ok=True)
    result = load_or_scan(torch_version(), lambda text: print(text, file=sys.stderr))
    failing = [t for t in result["trials_of_failing_ops"] if t["error"]]
    print(
        f"{len(failing)} failing trials of {result['trials']} "
        f"in {result['seconds']} s: {path}"
    )
