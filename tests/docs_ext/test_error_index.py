"""The error index per torch release: one block when the releases print the same message, the
messages side by side when they differ, and the releases that did not measure a scenario named.
The messages here are made up: what is checked is how the index shows them."""

from __future__ import annotations

import error_index
import pytest
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
    messages = dict(error_index.captured_messages())
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


def test_sdpa_raises_on_the_cpu_only_for_4d_inputs_without_dropout():
    assert "3-D inputs, or with `dropout_p > 0`" in error_index.sdpa_condition()
