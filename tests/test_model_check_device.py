"""Every tensor and generator check_model makes follows the inputs' device: with the default
device set to "meta" (where nothing can be computed), a check of CPU inputs still runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from double_backward import check_model


@pytest.fixture
def meta_default_device():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def models_on_cpu():
    torch.manual_seed(0)
    mlp = nn.Sequential(
        nn.Linear(3, 5, device="cpu"), nn.Tanh(), nn.Linear(5, 1, device="cpu")
    )
    norm = nn.Sequential(nn.Linear(3, 4, device="cpu"), nn.BatchNorm1d(4, device="cpu"),
                         nn.ReLU(), nn.Linear(4, 1, device="cpu"))  # fmt: skip
    return {"mlp": mlp, "batch norm": norm}


@pytest.mark.parametrize("wrt", ["inputs", "parameters", "both"])
def test_cpu_inputs_under_a_meta_default_device(meta_default_device, wrt):
    for name, model in models_on_cpu().items():
        x = torch.randn(4, 3, device="cpu")
        report = check_model(model, x, wrt=wrt)
        assert report.ok, f"{name}: {report}"


def test_a_break_is_located_under_a_meta_default_device(meta_default_device):
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, batch_first=True, device="cpu")
    x = torch.randn(2, 4, 8, device="cpu")
    report = check_model(lambda t: attention(t, t, t, need_weights=False)[0], x)
    assert [b.module for b in report.breaks] == ["attention"], str(report)
