"""The built-ins table: its trial, its cache per torch version, and the committed scan's claims.

What each trial must find is established by plain torch calls here (a gradient penalty written
out, ``gradgradcheck``), not by the scanner; the committed JSON's rows are re-run the same way.
"""

from __future__ import annotations

import json

import builtins_table as table
import pytest
import torch
from torch.autograd import gradgradcheck

from double_backward.model_check import FIXES


def test_a_trial_records_cdists_error_below_26_rows_and_none_at_32():
    small, large = table._cdist(5, 2.0), table._cdist(32, 2.0)
    failed = table._try("cdist", "5 rows", "float64", *small(torch.float64))
    assert failed.error == (
        "NotImplementedError: the derivative for '_cdist_backward' is not implemented."
    )
    x = torch.randn(32, 3, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(lambda t: torch.cdist(t, t.flip(0) + 1.0), (x,))
    assert (
        table._try("cdist", "32 rows", "float64", *large(torch.float64)).error is None
    )


def test_a_trial_without_a_second_derivative_graph_is_not_a_row():
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    trial = table._try("mul", "linear", "float64", lambda: 2 * x, [x])
    assert trial.error is None
    with pytest.raises(table.NotApplicable, match="no graph"):
        table.gradient_penalty(lambda: 2 * x, [x])
    with pytest.raises(table.NotApplicable, match="no differentiable output"):
        table.gradient_penalty(lambda: x.argmax(), [x])


def test_the_cache_is_read_for_its_torch_version_and_rescanned_for_another(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(table, "DATA_DIR", tmp_path)
    scans = []
    monkeypatch.setattr(
        table, "scan", lambda progress: scans.append(1) or {"format": table.FORMAT,
                                                            "torch": "9.9.9"}
    )  # fmt: skip
    (tmp_path / "torch-1.0.0.json").write_text(
        json.dumps({"format": table.FORMAT, "torch": "1.0.0", "kept": True})
    )
    assert table.load_or_scan("1.0.0", print)["kept"]
    assert scans == []
    table.load_or_scan("9.9.9", print)
    assert scans == [1] and (tmp_path / "torch-9.9.9.json").exists()


COMMITTED = json.loads(table.cache_path("2.13.0").read_text(encoding="utf-8"))


def test_the_committed_scan_is_for_the_torch_it_names():
    assert COMMITTED["torch"] == "2.13.0" and COMMITTED["date"]
    if torch.__version__.split("+")[0] != "2.13.0":
        pytest.skip("the committed rows are re-run with torch 2.13.0 only")


@pytest.mark.skipif(
    torch.__version__.split("+")[0] != COMMITTED["torch"], reason="another torch"
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
    recorded = {
        trial["error"] for trial in COMMITTED["trials_of_failing_ops"]
        if (trial["op"], trial["condition"], trial["dtype"]) == (op, condition, "float32")
    }  # fmt: skip
    assert recorded == {table.first_line(raised.value)}


def test_render_gives_each_error_a_row_with_conditions_and_fix():
    data = {
        "torch": "2.13.0", "date": "2026-12-03", "machine": "CPU only", "trials": 3,
        "ops_tried": 2, "seconds": 1,
        "trials_of_failing_ops": [
            {"op": "cdist", "condition": "p = 2, 5 rows", "dtype": "float64",
             "error": "E: cdist"},
            {"op": "cdist", "condition": "p = 2, 5 rows", "dtype": "float32",
             "error": "E: cdist"},
            {"op": "cdist", "condition": "p = 2, 32 rows", "dtype": "float64",
             "error": None},
            {"op": "ctc", "condition": "OpInfo sample", "dtype": "float64",
             "error": "E: a|b"},
        ],
    }  # fmt: skip
    text = table.render(data, FIXES, {"E: cdist": "cdist below 26 rows"})
    rows = [line for line in text.splitlines() if line.startswith("| [")]
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


@pytest.mark.skipif(
    torch.__version__.split("+")[0] != COMMITTED["torch"], reason="another torch"
)
def test_the_error_index_has_the_messages_the_table_records():
    """Each built-in scenario of the error index raises a message the committed scan saw."""
    import error_index

    builtin_titles = [
        title for title, *_, page in error_index.SCENARIOS
        if page == error_index._BUILTINS_PAGE
    ]  # fmt: skip
    assert len(builtin_titles) == 6
    recorded = {trial["error"] for trial in COMMITTED["trials_of_failing_ops"]}
    messages = dict(error_index.captured_messages())
    for title in builtin_titles:
        assert messages[title] in recorded, title
