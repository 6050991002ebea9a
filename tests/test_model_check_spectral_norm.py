"""check_model on a spectral-norm discriminator gives one verdict for both of torch's APIs.

``torch.nn.utils.spectral_norm`` and ``torch.nn.utils.parametrizations.spectral_norm`` both
run the power iteration under no_grad in train mode: autograd takes ``u`` and ``v`` as
constants, for training's gradient and for a gradient penalty's second derivative alike. The
reference here is plain torch: the WGAN-GP penalty's derivative with respect to the
parameters by autograd (a double backward) against central differences of the penalty itself,
with ``u`` and ``v`` held where the training forward left them (eval mode, which reads them
and runs no iteration).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from double_backward import check_model

APIS = {
    "torch.nn.utils.spectral_norm": nn.utils.spectral_norm,
    "torch.nn.utils.parametrizations.spectral_norm": (
        nn.utils.parametrizations.spectral_norm
    ),
}


def discriminator(sn) -> nn.Module:
    """An SNGAN / WGAN-GP critic for 1x8x8 images, as such code writes it."""
    return nn.Sequential(
        sn(nn.Conv2d(1, 8, 3, stride=2, padding=1)), nn.LeakyReLU(0.2),
        sn(nn.Conv2d(8, 16, 3, stride=2, padding=1)), nn.LeakyReLU(0.2),
        nn.Flatten(), sn(nn.Linear(16 * 2 * 2, 1)),
    )  # fmt: skip


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor,
                     alpha: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """WGAN-GP: (‖∇ₓ D(x̂)‖ - 1)² at x̂ between real and fake."""
    x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


def trained_one_step(sn):
    """The critic after one WGAN-GP step (float64), and the batch it was taken on."""
    torch.manual_seed(0)
    critic = discriminator(sn).double().train()
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.0, 0.9))
    real = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    fake = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    alpha = torch.rand(4, 1, 1, 1, dtype=torch.float64)
    loss = critic(fake).mean() - critic(real).mean()
    loss = loss + 10 * gradient_penalty(critic, real, fake, alpha)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return critic, (real, fake, alpha)


def _penalty_derivative_errors(sn) -> tuple[float, float]:
    """(error with u, v held, error with the iteration running): the penalty's derivative
    along a random parameter direction by autograd (train mode, the buffers put back before
    each call) against central differences (step 1e-6) of the penalty: with u and v held
    where the first training forward leaves them (eval mode), then with each shifted forward
    running the iteration again (train mode, buffers put back)."""
    critic, batch = trained_one_step(sn)
    start = [b.clone() for b in critic.buffers()]

    def restore() -> None:
        with torch.no_grad():
            for buffer, value in zip(critic.buffers(), start, strict=True):
                buffer.copy_(value)

    params = list(critic.parameters())
    generator = torch.Generator().manual_seed(1)
    direction = [
        torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in params
    ]
    restore()
    grads = torch.autograd.grad(
        gradient_penalty(critic, *batch), params, allow_unused=True
    )  # the last bias does not reach the input gradient
    analytic = sum(
        float((g * d).sum())
        for g, d in zip(grads, direction, strict=True)
        if g is not None
    )

    def shifted(step: float, held: bool) -> float:
        restore()
        if held:
            critic.train()
            with torch.no_grad():
                critic(
                    batch[0]
                )  # the iteration, once, from the start: u and v as above
            critic.eval()
        with torch.no_grad():
            for p, d in zip(params, direction, strict=True):
                p.add_(step * d)
        try:
            if not held:
                restore()
            return float(gradient_penalty(critic, *batch).detach())
        finally:
            with torch.no_grad():
                for p, d in zip(params, direction, strict=True):
                    p.sub_(step * d)
            critic.train()

    errors = []
    for held in (True, False):
        numeric = (shifted(1e-6, held) - shifted(-1e-6, held)) / 2e-6
        errors.append(abs(analytic - numeric) / max(abs(analytic), abs(numeric)))
    return errors[0], errors[1]


@pytest.mark.parametrize("api", list(APIS))
def test_both_spectral_norm_apis_are_ok_with_a_note(api: str) -> None:
    held, moving = _penalty_derivative_errors(APIS[api])
    # Plain torch: with u and v held, autograd's second derivative is right to float64
    # central differences' precision: the expected verdict is ok.
    assert held < 1e-6
    critic, (real, fake, alpha) = trained_one_step(APIS[api])
    critic = critic.float()
    x_hat = (alpha * real + (1 - alpha) * fake).float()
    report = check_model(critic, x_hat)
    assert report.ok, str(report)
    assert not report.breaks and not report.undecided
    text = str(report)
    assert "spectral norm in train mode (0, 2, 5)" in text, text
    assert "treats them as constants, exactly as training's first-order" in text, text
    # Where the two answers came from: shifted forwards that run the iteration again see u
    # and v move with the weights, a derivative autograd never takes (7e-2 and 2e-2
    # relative here, torch 2.13 CPU), far above float64 central differences' 1e-9.
    assert moving > 1e-4, moving


def test_the_two_apis_get_the_same_report_and_the_critic_is_unchanged() -> None:
    reports = []
    for api in APIS.values():
        critic, (real, fake, alpha) = trained_one_step(api)
        before = {k: v.clone() for k, v in critic.state_dict().items()}
        counts = [
            getattr(h, "n_power_iterations", None)
            for m in critic.modules() for h in m._forward_pre_hooks.values()
        ]  # fmt: skip
        reports.append(check_model(critic, alpha * real + (1 - alpha) * fake))
        after = critic.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert counts == [
            getattr(h, "n_power_iterations", None)
            for m in critic.modules() for h in m._forward_pre_hooks.values()
        ]  # fmt: skip
    assert [r.ok for r in reports] == [True, True]
    assert [r.checked[0] for r in reports][0] == [r.checked[0] for r in reports][1]


def test_a_callable_over_the_critic_is_put_back_with_its_iterations() -> None:
    critic, (real, fake, alpha) = trained_one_step(
        nn.utils.parametrizations.spectral_norm
    )
    norms = [m for m in critic.modules() if type(m).__name__ == "_SpectralNorm"]
    report = check_model(lambda x: critic(x), alpha * real + (1 - alpha) * fake)
    assert report.ok, str(report)
    assert [n.n_power_iterations for n in norms] == [1, 1, 1]


def test_eval_mode_has_no_note() -> None:
    critic, (real, fake, alpha) = trained_one_step(nn.utils.spectral_norm)
    report = check_model(critic.eval(), alpha * real + (1 - alpha) * fake)
    assert report.ok and "spectral norm" not in str(report), str(report)
