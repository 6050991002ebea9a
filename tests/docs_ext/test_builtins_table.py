"""The built-ins table: its trial, its cache per torch version, and the committed scan's claims.

What each trial must find is established by plain torch calls here (a gradient penalty written
out, ``gradgradcheck``), not by the scanner; the committed JSON's rows are re-run the same way.
"""

from __future__ import annotations

from types import SimpleNamespace

import builtins_table as table
import pytest
import torch
import versioned_results as vr
from torch.autograd import gradgradcheck

from double_backward.checker.model import FIXES


def _penalty_error(f, *inputs) -> str | None:
    """What a gradient penalty written out raises on ``f`` (``Type: first line``), or None."""
    grads = torch.autograd.grad(f(*inputs).sum(), inputs, create_graph=True)
    try:
        torch.autograd.grad(sum((g**2).sum() for g in grads), inputs)
    except (RuntimeError, NotImplementedError) as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return None


def test_a_trial_records_cdists_error_below_26_rows_and_none_at_32():
    small, large = table._cdist(5, 2.0), table._cdist(32, 2.0)
    failed = table._try("cdist", "5 rows", "float64", *small(torch.float64))
    x1, x2 = (torch.randn(5, 3, dtype=torch.float64, requires_grad=True) for _ in "12")
    expected = _penalty_error(torch.cdist, x1, x2)
    if torch.__version__.split("+")[0] == "2.13.0":  # torch 2.14.1 has this derivative
        assert expected == (
            "NotImplementedError: the derivative for '_cdist_backward' is not implemented."
        )
    assert failed.error == expected
    x = torch.randn(32, 3, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(lambda t: torch.cdist(t, t.flip(0) + 1.0), (x,))
    assert (
        table._try("cdist", "32 rows", "float64", *large(torch.float64)).error is None
    )


def test_a_trial_without_a_second_derivative_graph_is_not_measured_not_a_pass():
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    # round's derivative is zeros that do not depend on anything: no graph to differentiate.
    (grad,) = torch.autograd.grad((torch.round(x) ** 2).sum(), x, create_graph=True)
    assert not grad.requires_grad
    trial = table._try("round", "zero derivative", "float64", lambda: torch.round(x), [x])
    assert trial.error == "not measured: the gradient has no graph (a zero second derivative)"
    assert table.not_measured(trial.error) and not table.measured_error(trial.error)
    with pytest.raises(table.NotApplicable, match="no graph"):
        table.gradient_penalty(lambda: torch.round(x), [x])
    with pytest.raises(table.NotApplicable, match="no differentiable output"):
        table.gradient_penalty(lambda: x.argmax(), [x])


def test_a_trial_on_an_empty_input_is_not_measured():
    x = torch.randn(0, 1, 5, 5, dtype=torch.float64, requires_grad=True)
    # On an empty input the penalty runs and differentiates nothing: its gradient is empty.
    (grad,) = torch.autograd.grad(
        (torch.nn.functional.unfold(x, 2) ** 2).sum(), x, create_graph=True
    )
    assert grad.numel() == 0
    trial = table._try(
        "nn.functional.unfold", "empty", "float64",
        lambda: torch.nn.functional.unfold(x, 2), [x],
    )  # fmt: skip
    assert trial.error == "not measured: an input is empty"


def test_the_committed_scan_counts_no_empty_sample_as_a_pass():
    """The six ops the scan once passed on empty samples alone (issue 42)."""
    ops = ("cholesky_inverse", "cholesky_solve", "linalg.svd", "nn.functional.unfold",
           "sparse.sampled_addmm", "svd")  # fmt: skip
    for cell, value in COMMITTED.results.items():
        op, condition, _ = table.split_cell(cell)
        if op in ops and "shape (0" in condition:
            assert table.not_measured(value), cell


def test_the_committed_scan_measures_unfold_and_fold_on_non_empty_inputs():
    F = torch.nn.functional
    # Their double backward exists: gradgradcheck, independent of the scan, says so.
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(lambda t: F.unfold(t, kernel_size=2) ** 2, (x,))
    cols = torch.randn(1, 8, 4, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(lambda t: F.fold(t, (3, 3), kernel_size=2) ** 2, (cols,))
    for op, condition in [
        ("nn.functional.unfold", "kernel 2, input (1, 2, 4, 4)"),
        ("nn.functional.fold", "kernel 2, output 3 x 3, input (1, 8, 4)"),
    ]:
        for dtype in table.DTYPES:
            assert COMMITTED.results[table.cell_key(op, condition, dtype)] is None


def test_an_op_tried_only_where_nothing_was_differentiated_is_not_measured():
    trials = [
        {"op": "svd", "condition": "OpInfo sample 1, input shape (0, 0)", "dtype": d,
         "error": "not measured: an input is empty"} for d in table.DTYPES
    ]  # fmt: skip
    assert table._summary(trials) == "not measured (2 trials, none differentiated twice)"
    trials.append({**trials[0], "condition": "non-empty", "error": None})
    assert table._summary(trials) == "passed 1 of 1 measured trials; 2 not measured"


def test_the_ops_readers_ask_about_are_listed_whether_they_raise_or_not():
    measurement = _measurement(
        "2.13.0",
        [("nn.functional.grid_sample", "bilinear", "float64", None),
         ("nn.functional.unfold", "OpInfo sample 1, input shape (0, 1, 5, 5)", "float64",
          "not measured: an input is empty"),
         ("nn.functional.max_pool2d", "kernel 2", "float64", "E: pool")],
        {"trials": 3, "ops_tried": 3, "seconds": 1, "not_measured": 1},
    )  # fmt: skip
    text = table.render({"2.13.0": measurement}, FIXES, {})
    asked = text[text.index("## Ops readers ask about") : text.index("## What changed")]
    assert "| grid_sample | `nn.functional.grid_sample` | passed 1 of 1 measured" in asked
    assert (
        "| unfold and fold (im2col, col2im) | `nn.functional.unfold` | not measured" in asked
    )
    assert "| max pooling | [`nn.functional.max_pool2d`](#builtin-1) | raised in 1" in asked
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert [row.split("`")[1] for row in rows] == ["nn.functional.max_pool2d"]
    assert "1 of them not measured" in text


def test_not_measured_against_an_older_files_pass_is_not_a_change():
    older = _measurement("2.13.0", [("svd", "empty", "float64", "not measured: an input is empty")])
    newer = _measurement("2.14.1", [("svd", "empty", "float64", None)])
    changes = table._changes({"2.13.0": older, "2.14.1": newer})
    assert "No trial run in every release differs" in " ".join(changes)


def test_a_linear_ops_backward_is_differentiated_as_after_a_nonlinear_layer():
    # embedding_bag is linear in its weight: a loss linear in its output never differentiates
    # its backward, a squared one does (plain torch, written out).
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 3])
    weight = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)

    def penalty(loss_of):
        out = torch.nn.functional.embedding_bag(indices, weight, offsets, mode="sum")
        (grad,) = torch.autograd.grad(loss_of(out), weight, create_graph=True)
        if grad.requires_grad:
            torch.autograd.grad((grad * grad).sum(), weight)
        return grad.requires_grad

    assert penalty(lambda out: out.sum()) is False  # no graph: nothing to find
    try:
        penalty(lambda out: (out * out).sum())
        expected = None
    except (RuntimeError, NotImplementedError) as error:
        expected = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    if torch.__version__.split("+")[0] == "2.13.0":
        assert expected is not None and "_embedding_bag_backward" in expected
    trial = table._try("embedding_bag", "weight", "float64",
                       *table._embedding_bag("sum")(torch.float64))  # fmt: skip
    assert trial.error == expected


def test_the_build_reads_the_committed_scan_and_scans_only_a_release_without_one(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(vr, "DATA_DIR", tmp_path)
    scans = []

    def measure(progress=print):
        scans.append(1)
        return {table.cell_key("cdist", "p = 2, 5 rows", "float64"): "E: scanned"}, {}

    monkeypatch.setattr(table, "measure", measure)
    app = SimpleNamespace(srcdir=tmp_path)
    committed = {table.cell_key("cdist", "p = 2, 5 rows", "float64"): "E: committed"}
    vr.write(table.NAME, committed, torch.__version__)
    table._write_table(app)
    generated = tmp_path / "_generated" / "builtins_table.md"
    assert scans == [] and "E: committed" in generated.read_text()
    vr.path(table.NAME, torch.__version__).unlink()
    table._write_table(
        app
    )  # the digest of committed files changed: made again, by a scan
    assert scans == [1] and "E: scanned" in generated.read_text()
    assert vr.read(vr.path(table.NAME, torch.__version__)).results == {
        table.cell_key("cdist", "p = 2, 5 rows", "float64"): "E: scanned"
    }


COMMITTED = vr.read(vr.path(table.NAME, "2.13.0"))


def test_the_committed_scan_is_for_the_torch_it_names():
    assert COMMITTED.torch == "2.13.0" and COMMITTED.measured
    if torch.__version__.split("+")[0] != "2.13.0":
        pytest.skip("the committed rows are re-run with torch 2.13.0 only")


@pytest.mark.parametrize(
    "file",
    vr.committed_files(table.NAME),
    ids=lambda f: f.stem,
)
def test_every_committed_release_ran_every_probe_in_both_dtypes(file):
    results = vr.read(file).results
    for op, condition, _ in table.PROBES:
        for dtype in table.DTYPES:
            assert table.cell_key(op, condition, dtype) in results


@pytest.mark.skipif(
    torch.__version__.split("+")[0] != COMMITTED.torch, reason="another torch"
)
@pytest.mark.parametrize(
    ("op", "condition"),
    [
        ("cdist", "p = 2, 16 rows"),
        ("cdist", "p = 1, 32 rows"),
        ("nn.functional.scaled_dot_product_attention", "default CPU kernel, L = 256"),
        ("nn.TransformerEncoderLayer (eval)", "eval mode, dropout=0, sequence of 4"),
    ],
)
def test_committed_rows_raise_when_run_again(op, condition):
    (make,) = [m for o, c, m in table.PROBES if (o, c) == (op, condition)]
    call, wrt = make(torch.float32)
    output = call()
    grads = torch.autograd.grad(output.sum(), wrt, create_graph=True, allow_unused=True)
    with pytest.raises((RuntimeError, NotImplementedError)) as raised:
        torch.autograd.grad(
            sum((g**2).sum() for g in grads if g is not None), wrt, allow_unused=True
        )
    recorded = COMMITTED.results[table.cell_key(op, condition, "float32")]
    assert recorded == table.first_line(raised.value)


def _measurement(torch_version, trials, about=None):
    results = {table.cell_key(op, condition, dtype): error
               for op, condition, dtype, error in trials}  # fmt: skip
    return vr.Measurement(
        torch_version, "2026-12-03 18:00 UTC", results, about=about or {}
    )


def test_render_gives_each_error_a_row_with_conditions_and_fix():
    measurement = _measurement(
        "2.13.0",
        [("cdist", "p = 2, 5 rows", "float64", "E: cdist"),
         ("cdist", "p = 2, 5 rows", "float32", "E: cdist"),
         ("cdist", "p = 2, 32 rows", "float64", None),
         ("ctc", "OpInfo sample 1, input shape (2,)", "float64", "E: a|b")],
        {"trials": 4, "ops_tried": 2, "seconds": 1},
    )  # fmt: skip
    text = table.render(
        {"2.13.0": measurement}, FIXES, {"E: cdist": "cdist below 26 rows"}
    )
    assert (
        "torch 2.13.0: measured 2026-12-03 18:00 UTC, 4 gradient penalties over 2 ops "
        "in 1 s (this file predates telling a trial that differentiated nothing from a "
        "pass: its passes may include such trials); 2 ops raised" in text
    )
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    # A file without "not_measured" (written before issue 42) calls no trial a pass.
    assert rows[0].startswith(
        "| [`cdist`](#builtin-1) | raised in 2 of 3 trials; no error in 1 trial, not told "
        "apart from trials that differentiated nothing |"
    )
    assert (
        "use_mm_for_euclid_dist" in rows[0] and "plot_04_untracked_backward" in rows[1]
    )
    cdist = text[text.index("### `cdist`") : text.index("### `ctc`")]
    assert "- **Raises:** p = 2, 5 rows (float64, float32)." in cdist
    assert "errors.md#cdist-below" in cdist
    assert "- **Passes:** p = 2, 32 rows (float64)." in cdist
    ctc = text[text.index("### `ctc`") :]
    assert "E: a|b" in ctc
    assert "OpInfo samples: 1 in float64" in ctc and "no other condition tried" in ctc
    assert "One torch release measured" in text


def test_render_shows_a_column_per_release_and_the_trials_that_changed():
    older = _measurement(
        "2.13.0",
        [("cdist", "p = 2, 5 rows", "float64", "E: cdist"),
         ("cdist", "p = 2, 5 rows", "float32", "E: cdist"),
         ("cdist", "p = 2, 32 rows", "float64", None),
         ("pdist", "5 rows", "float64", "E: pdist"),
         ("sinh", "OpInfo sample 1, input shape (3,)", "float64", None)],
    )  # fmt: skip
    newer = _measurement(
        "2.14.1",
        [("cdist", "p = 2, 5 rows", "float64", None),
         ("cdist", "p = 2, 5 rows", "float32", None),
         ("cdist", "p = 2, 32 rows", "float64", None),
         ("pdist", "5 rows", "float64", "E: pdist"),
         ("added", "OpInfo sample 1, input shape (3,)", "float64", "E: added")],
        {"not_measured": 0},
    )  # fmt: skip
    older.about["not_measured"] = 0
    text = table.render({"2.13.0": older, "2.14.1": newer}, FIXES, {})
    assert (
        "| Op (its error and conditions below) | torch 2.13.0 | torch 2.14.1 | Fix |"
        in text
    )
    rows = {
        line.split("`")[1]: line for line in text.splitlines() if line.startswith("| [")
    }
    assert set(rows) == {"added", "cdist", "pdist"}
    assert (
        "| raised in 2 of 3 measured trials | passed 3 of 3 measured trials |"
        in rows["cdist"]
    )
    assert "| not tried | raised in 1 of 1 measured trials |" in rows["added"]
    changes = text[text.index("## What changed") : text.index("## Each op")]
    assert "2 trials differ" in changes
    assert (
        "- `cdist`, p = 2, 5 rows (float64, float32). torch 2.13.0: `E: cdist`; "
        "torch 2.14.1: passes." in changes
    )
    assert "2 trials ran in some releases only" in changes
    pdist = text[text.index("### `pdist`") :]
    assert "**torch 2.13.0 and 2.14.1:**" in pdist  # the same trials: shown once


@pytest.mark.skipif(
    torch.__version__.split("+")[0] != COMMITTED.torch, reason="another torch"
)
def test_the_error_index_has_the_messages_the_table_records():
    """Each built-in scenario of the error index raises a message the committed scan saw."""
    import error_index

    builtin_titles = [
        title for title, *_, page in error_index.SCENARIOS
        if page in (error_index._BUILTINS_PAGE, error_index._CDIST_PAGE)
    ]  # fmt: skip
    assert len(builtin_titles) == 6
    recorded = set(COMMITTED.results.values())
    messages = dict(error_index.captured_messages())
    for title in builtin_titles:
        assert messages[title] in recorded, title
