"""The DDP/FSDP page's table, as kept per torch release (no process is started here)."""

from __future__ import annotations

import torch

from double_backward.distributed import results
from double_backward.distributed.check import DistributedReport, Step


def test_a_cell_says_what_each_step_did():
    raised = Step("raises", message="RuntimeError: Expected to have finished reduction")
    silent = Step("not synchronized", errors={"0.weight": 0.25, "4.bias": 0.604})
    assert results.outcome(raised) == "raises Expected to have finis..."
    assert results.outcome(silent) == "silent, error 0.60"  # the largest relative error
    assert results.outcome(Step("synchronized")) == "synchronized"


def test_every_row_is_a_case_and_every_case_a_row():
    x = torch.zeros(8, 4, dtype=torch.float64)
    assert {name for _, _, name in results.ROWS} == {"r1_alone", *results.cases(x)}


def test_the_table_keys_each_row_by_its_label_and_wrapper():
    reports = {
        name: DistributedReport(name, wrapper.lower(), 2, [Step("synchronized")])
        for _, wrapper, name in results.ROWS
    }
    table = results.table(reports)
    assert table["R1 on its own (lazy R1) (DDP)"] == ["synchronized"]
    assert table["reshard_after_forward=False (FSDP)"] == ["synchronized"]
    assert len(table) == len(results.ROWS)
