"""The DDP/FSDP page's table, as kept per torch release, and what the page shows of FSDP."""

from __future__ import annotations

import pytest
import torch

from double_backward.distributed import launch, results
from double_backward.distributed.check import DistributedReport, Step
from double_backward.distributed.probes import unsharded_storage


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


# -- the page's claims, on the installed torch (two gloo processes each) -------------------
@pytest.mark.distributed
def test_the_page_table_r1_alone_is_silent_then_raises_and_every_fix_synchronizes():
    table = results.measure()
    silent, then = table["R1 on its own (lazy R1) (DDP)"]
    assert silent.startswith("silent, error ") and float(silent.split()[-1]) > 0.1
    assert then.startswith("raises Expected to have finis")
    assert table["static_graph=True (DDP)"][1].startswith("silent")
    for row in [
        "critic without the last bias (DDP)",
        "critic loss + R1, one backward (DDP)",
        "R1 + 0 * out.sum() (DDP)",
        "R1 in synchronized_gradients (DDP)",
        "in synchronized_gradients (DDP)",
        "MAML-style (DDP)",
        "R1 in synchronized_gradients (FSDP)",
    ]:
        assert table[row] == ["synchronized", "synchronized"], row
    assert table["R1 on its own (FSDP)"][0].startswith("raises setStorage")
    assert table["reshard_after_forward=False (FSDP)"][0].startswith("raises setStorage")


@pytest.mark.distributed
def test_fully_shard_frees_the_unsharded_weight_after_the_first_backward():
    storage = launch(unsharded_storage, 2)
    assert storage[0] == storage[1]
    weight_bytes = 16 * 4 * 8  # the first layer's weight, float64
    for setting in ("reshard_after_forward=True", "reshard_after_forward=False"):
        assert storage[0][setting]["after grad"] == 0
        assert str(storage[0][setting]["second backward"]).startswith("raises")
    kept = [seen for name, seen in storage[0].items() if "synchronized" in name]
    assert kept and kept[0]["after grad"] == weight_bytes
    assert kept[0]["second backward"] == "runs"
