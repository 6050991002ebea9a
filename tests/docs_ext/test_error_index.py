"""The error index per torch release: one block when the releases print the same message, the
messages side by side when they differ, and the releases that did not measure a scenario named.
The messages here are made up: what is checked is how the index shows them."""

from __future__ import annotations

import error_index
import pytest
import torch
from versioned_results import Measurement

TITLE = "Marked once differentiable"


def _releases(new: dict) -> dict[str, Measurement]:
    old = {TITLE: "RuntimeError: old wording"}
    return {
        "2.13.0": Measurement("2.13.0", "at build time", old, live=True),
        "2.14.1": Measurement("2.14.1", "2026-12-03 18:37 UTC", new),
    }


def test_one_message_shown_once_with_the_releases_that_printed_it():
    text = error_index.printed(TITLE, _releases({TITLE: "RuntimeError: old wording"}))
    assert text.count("RuntimeError: old wording") == 1
    assert "```text\nRuntimeError: old wording\n```" in text
    assert "Printed by torch 2.13.0 and 2.14.1." in text


def test_changed_message_shown_side_by_side():
    text = error_index.printed(TITLE, _releases({TITLE: "RuntimeError: a | b"}))
    assert "differs between torch releases" in text
    assert "| torch 2.13.0 | torch 2.14.1 |" in text
    assert "| `` RuntimeError: old wording `` | `` RuntimeError: a \\| b `` |" in text
    assert "```text" not in text


def test_a_scenario_that_raised_nothing_on_a_release_says_so():
    text = error_index.printed(TITLE, _releases({TITLE: None}))
    assert "| `` RuntimeError: old wording `` | raised no error |" in text


def test_a_scenario_added_since_a_measurement_is_not_measured_there():
    text = error_index.printed(TITLE, _releases({}))
    assert "Printed by torch 2.13.0." in text
    assert "Not measured on torch 2.14.1" in text
    assert "nox -s matrix -- 2.14.1" in text


def test_every_scenario_has_a_section_in_order():
    measurements = {
        "2.13.0": Measurement(
            "2.13.0", "", {title: f"E: {title}" for title, *_ in error_index.SCENARIOS}
        )
    }
    page = error_index.table(measurements)
    headings = [line[3:] for line in page.splitlines() if line.startswith("## ")]
    assert headings == [title for title, *_ in error_index.SCENARIOS]


def test_the_installed_torch_must_raise_every_scenario(monkeypatch):
    def raises_nothing() -> None:
        pass

    monkeypatch.setattr(
        error_index, "SCENARIOS", [("Nothing", raises_nothing, "c", "f", "p")]
    )
    error_index.measure.cache_clear()
    try:
        assert error_index.measure() == {"Nothing": None}
        with pytest.raises(error_index.RaisedNothing, match="raises_nothing"):
            error_index.captured_messages()
    finally:
        error_index.measure.cache_clear()


def test_grad_mode_comes_first_among_the_causes():
    titles = [title for title, *_ in error_index.SCENARIOS]
    assert titles[:3] == [
        "Grad mode is off: torch.no_grad",
        "Inference mode: torch.inference_mode, Lightning's validation and test steps",
        "Inference tensors cannot be saved for backward",
    ]
    (no_graph,) = [cause for title, _, cause, *_ in error_index.SCENARIOS
                   if title == "The gradient has no graph"]  # fmt: skip
    assert no_graph.startswith("Grad mode was off")


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (
            error_index._under_no_grad,
            "does not require grad and does not have a grad_fn",
        ),
        (error_index._under_inference_mode, "does not require grad"),
        (error_index._inference_tensor_saved, "Inference tensors cannot be saved"),
    ],
)
def test_grad_mode_scenarios_raise_what_plain_torch_raises(scenario, expected):
    # The same failure written out in plain torch, outside the scenario.
    x = torch.ones(2, 1, requires_grad=True)
    with torch.inference_mode(), torch.enable_grad():
        y = (x * 2).sum()
    assert not y.requires_grad  # enable_grad does not leave inference mode
    with pytest.raises(RuntimeError, match=expected):
        scenario()


def test_enable_grad_inside_no_grad_gives_the_second_derivative():
    x = torch.linspace(0, 1, 5, dtype=torch.float64).requires_grad_()
    with torch.no_grad(), torch.enable_grad():
        (dy,) = torch.autograd.grad(torch.sin(x).sum(), x, create_graph=True)
        (d2y,) = torch.autograd.grad(dy.sum(), x)
    torch.testing.assert_close(d2y, -torch.sin(x.detach()))


def test_inductor_raises_donated_buffers_and_the_switch_removes_it():
    with pytest.raises(RuntimeError, match="non-empty donated buffers") as raised:
        error_index._inductor_donated_buffer()
    assert "torch._functorch.config.donated_buffer=False" in str(raised.value)
    import torch._functorch.config as functorch_config

    with functorch_config.patch(donated_buffer=False):
        error_index._inductor_donated_buffer()  # the same steps raise nothing


def test_whole_messages_are_kept_and_first_lines_are_what_is_committed():
    error = RuntimeError("first line,\nsecond line")
    assert error_index.whole_message(error) == "RuntimeError: first line,\nsecond line"
    assert error_index.first_line(error) == "RuntimeError: first line"


def test_a_release_that_kept_the_first_line_agrees_with_the_whole_message():
    whole = "RuntimeError: old wording\nmore of it"
    text = error_index.printed(
        TITLE, _releases({TITLE: "RuntimeError: old wording"}), whole
    )
    assert f"```text\n{whole}\n```" in text
    assert "Printed by torch 2.13.0 and 2.14.1." in text


def test_older_wordings_are_shown_with_the_releases_that_print_them():
    text = error_index.printed(
        "Old style under torch.func",
        {"2.13.0": Measurement("2.13.0", "", {"Old style under torch.func": "E"})},
    )
    assert "docs/master/notes/extending.func.html" in text
    assert "As torch 2.0 and 2.1" in text


def test_the_gradgradcheck_message_is_the_same_each_run():
    error_index.measure.cache_clear()
    try:
        first = error_index.captured_message(error_index._gradgradcheck_mismatch)
        torch.manual_seed(123)  # whatever ran before
        assert (
            error_index.captured_message(error_index._gradgradcheck_mismatch) == first
        )
    finally:
        error_index.measure.cache_clear()


def test_cuda_messages_cut_short_are_shown_whole_as_torchs_library_holds_them():
    import mmap
    from pathlib import Path

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    with (
        library.open("rb") as file,
        mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
    ):
        for whole in error_index.CUDA_WHOLE_MESSAGES:
            body = whole.split(": ", 1)[1].split("Double backwards", 1)[1]
            assert data.find(("Double backwards" + body).encode()) != -1
    cut = (
        "NotImplementedError: the derivative for '_cudnn_rnn_backward' is not "
        "implemented. Double backwards is not supported for CuDNN RNNs…"
    )
    assert error_index.whole_cuda_message(cut) == error_index.CUDA_WHOLE_MESSAGES[0]
    assert error_index.whole_cuda_message("E: whole") == "E: whole"


def test_the_cause_is_scoped_to_the_releases_that_raise():
    text = error_index.table(_releases({TITLE: None}))
    section = text.split(f"## {TITLE}")[1].split("\n## ")[0]
    scoped = "- **Cause:** In torch 2.13.0, not in 2.14.1, where the same call raised no error"
    assert scoped in section
    assert "In torch" not in error_index.table(_releases({TITLE: "RuntimeError: old wording"}))


def test_multi_margin_fix_matches_the_loss_to_the_second_derivative():
    errors = error_index.check_multi_margin_fix()
    assert errors["value"] < 1e-12 and errors["gradient"] < 1e-12
    assert errors["second derivative"] < 1e-6 * errors["second derivative (scale)"]
    assert errors["second derivative (scale)"] > 1e-3  # a second derivative that is not zero


def test_multi_margin_fix_with_the_target_term_fails_the_check(monkeypatch):
    import torch

    def with_target_term(x, target, margin=1.0):  # the fix as the index printed it before
        return torch.clamp(margin - x.gather(1, target[:, None]) + x, min=0).mean()

    monkeypatch.setattr(error_index, "multi_margin_loss_by_hand", with_target_term)
    with pytest.raises(error_index.FixIsWrong, match="value"):
        error_index.check_multi_margin_fix()


def test_other_causes_raise_the_entry_message_or_the_build_fails():
    messages = {t: m for t, m in error_index.measure_whole().items() if m is not None}
    found = error_index.other_causes(messages)
    assert set(found) == set(error_index.ALSO_RAISED_BY)
    with pytest.raises(error_index.FixIsWrong, match="_once_differentiable_whole_loss"):
        error_index.other_causes({**messages, "The gradient has no graph": "E: other"})


def test_once_differentiable_beside_another_term_is_silent_and_wrong():
    second, right = error_index.once_differentiable_silent()
    assert second == [3.0, 6.0, 12.0]  # 6x: the Function's own term, 2, is missing
    assert right == [5.0, 8.0, 14.0]
    note = error_index.silent_once_differentiable()
    assert "[3.0, 6.0, 12.0] where it is [5.0, 8.0, 14.0]" in note


def _plain_sdpa_double_backward_raises(shape) -> bool:
    """Plain torch, other shapes than the extension's: does a gradient penalty through SDPA
    on the CPU raise at its second backward?"""
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    grads = torch.autograd.grad(out.sum(), (q, k, v), create_graph=True)
    try:
        torch.autograd.grad(sum(g.square().sum() for g in grads), (q, k, v))
    except RuntimeError:
        return True
    return False


def test_sdpa_condition_says_what_this_release_does_with_3d_inputs():
    note = error_index.sdpa_condition()
    assert note.startswith(f"On torch {torch.__version__.split('+')[0]}, it raises for 4-D")
    assert _plain_sdpa_double_backward_raises((2, 3, 5, 4))  # the entry's own case
    if _plain_sdpa_double_backward_raises((3, 5, 4)):
        assert "3-D inputs (batch, length, features) raise too" in note
    else:
        assert "with 3-D inputs, or with `dropout_p > 0`, attention takes the math path" in note


@pytest.mark.parametrize("kernel", sorted(error_index.FUSED_CUDA_KERNELS))
def test_each_fused_cuda_kernel_has_an_entry_raised_on_the_meta_device(kernel):
    (entry,) = [e for e in error_index.SCENARIOS if f"{kernel} CUDA kernel" in e[0]]
    title, scenario, cause, fix, page = entry
    operator, _ = error_index.FUSED_CUDA_KERNELS[kernel]
    # The message a GPU prints (checker/shared/cuda_fixes.py's keys are those operators).
    expected = f"RuntimeError: derivative for aten::{operator}_backward is not implemented"
    assert error_index.captured_message(scenario) == expected
    from double_backward.checker.shared.cuda_fixes import CUDA_FIXES

    for remedy in ("SDPBackend.MATH", "double_backward.ops.scaled_dot_product_attention",
                   "double_backward.ops.replaced()"):  # fmt: skip
        assert remedy in fix and remedy in CUDA_FIXES[operator]
    assert page == error_index.CUDA_PAGE and "meta device" in cause
