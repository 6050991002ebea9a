"""check_model on real models built from their constructors (timm, transformers, torch.nn),
against verdicts established with plain torch (truth.py): the penalty raising or not, and for
a raising one the module whose own forward created the node whose backward raised.

On each: no false alarm (a model whose penalty runs is reported ok: neither a break nor
"could not decide"), no miss, no crash, the right modules named, and after applying the fix
the report prints, no break.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from double_backward import check_model

from . import truth
from .zoo import CASES, Case, sn_critic


def _run_penalty(case: Case, fn=None) -> None:
    truth.penalty(fn or case.fn, case.inputs, case.kwargs, case.parameters, case.wrt,
                  case.embeddings)  # fmt: skip


def _plain_penalty(case: Case, fn=None) -> str | None:
    return truth.raises(lambda: _run_penalty(case, fn))


@pytest.mark.parametrize("name", sorted(CASES))
def test_verdict_matches_plain_torch(name):
    case = CASES[name]()
    report = check_model(case.fn, *case.inputs, kwargs=case.kwargs, wrt=case.wrt)
    _says_what_it_differentiated(case, report)
    error = _plain_penalty(case)
    if error is None:
        assert report.ok, str(report)  # no break, and not "could not decide"
        return
    expected = truth.raising_modules(
        case.roots, lambda: _run_penalty(case), truth.node_prefix(error)
    )
    assert expected, error
    assert sorted(b.module for b in report.breaks) == expected, str(report)
    assert {b.kind for b in report.breaks} == {"raises"}, str(report)
    assert all(case.fix in b.fix for b in report.breaks), str(report)
    # The printed fix, applied: plain torch runs the penalty, and check_model finds nothing.
    assert case.fixed is not None or case.fixed_fn is not None, "a fix to apply"
    with case.fixed() if case.fixed else contextlib.nullcontext():
        fn = case.fixed_fn or case.fn
        assert _plain_penalty(case, fn) is None
        after = check_model(fn, *case.inputs, kwargs=case.kwargs, wrt=case.wrt)
    assert after.ok, str(after)


def _says_what_it_differentiated(case: Case, report) -> None:
    """Token ids only: the parameters by default, said in the report; the embeddings on
    request, each lookup of the table one tensor differentiated."""
    floating = truth.floats((case.inputs, case.kwargs))
    if case.wrt is None and not floating:
        assert report.wrt == "parameters", str(report)
        assert "no input is floating point" in str(report), str(report)
    if case.wrt == "embeddings":
        paths = {id(m): name for name, m in case.roots[""].named_modules()}
        names = ", ".join(paths[id(m)] for m in case.embeddings)
        assert report.wrt == "embeddings", str(report)
        assert (f"{len(case.embeddings)} output(s) of the input embedding ({names})"
                in " ".join(report.checked)), str(report)  # fmt: skip


@pytest.mark.parametrize("parametrized", [False, True])
def test_spectral_norm_in_train_mode_is_ok_with_both_apis(parametrized):
    """In train mode, u and v move at every forward (under no_grad): autograd takes them as
    constants, at first order as at second. Plain torch, with u and v held where a training
    forward leaves them (eval mode reads them), finds no disagreement in either layer; both
    APIs are reported ok, with the note that says so."""
    model = sn_critic(parametrized=parametrized).double().train()
    x = torch.randn(6, 4, dtype=torch.float64)
    with torch.no_grad():
        inputs = {"0": x, "2": model[1](model[0](x))}  # what each layer is called with
    for name, layer in {"0": model[0], "2": model[2]}.items():
        layer.eval()  # u and v held where the training forward above left them
        params = [p for p in layer.parameters() if p.requires_grad]
        error = truth.mixed_second_derivative_error(
            layer, inputs[name], params, lambda: None
        )
        assert error < 1e-6, (name, error)  # float64 central differences' precision
    report = check_model(
        sn_critic(parametrized=parametrized).train(), torch.randn(6, 4)
    )
    assert report.ok and not report.breaks, str(report)
    assert "spectral norm in train mode (0, 2)" in str(report), str(report)


def test_the_models_are_unchanged_and_their_state_restored():
    case = CASES["batchnorm_cnn_eval"]()
    before = {k: v.clone() for k, v in case.fn.state_dict().items()}
    check_model(case.fn, *case.inputs)
    after = case.fn.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    bert_case = CASES["bert_lambda_inputs_embeds"]()
    bert = bert_case.roots["bert"]
    weights = {k: v.clone() for k, v in bert.state_dict().items()}
    check_model(bert_case.fn, *bert_case.inputs)
    assert all(
        v.dtype == weights[k].dtype and torch.equal(v, weights[k])
        for k, v in bert.state_dict().items()
    )
