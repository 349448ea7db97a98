"""Stacked LSTMs: the hand-written recurrence backward against autograd and finite differences,
and a stack of members against each member's own ``nn.LSTM``."""

from __future__ import annotations

import pytest
import torch

from agile_core.networks.lstm import LstmLayer
from agile_core.networks.stacked_lstm import LstmRecurrence, StackedLstmLayer


def _inputs(members: int = 3, batch: int = 2, steps: int = 5, size: int = 3, restarts: bool = True,
            dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    keep = None
    if restarts:
        keep = (torch.rand(steps, members, batch, 1, generator=gen) > 0.3).to(dtype)
    return (randn(steps, members, batch, 4 * size), 0.5 * randn(members, 4 * size, size),
            randn(members, batch, size), randn(members, batch, size), keep)


@pytest.mark.parametrize("restarts", [False, True], ids=["no-restarts", "restarts"])
def test_recurrence_backward_passes_gradcheck(restarts: bool) -> None:
    projected, recurrent, h0, c0, keep = _inputs(restarts=restarts)
    args = [t.requires_grad_() for t in (projected, recurrent, h0, c0)]
    assert torch.autograd.gradcheck(lambda *a: LstmRecurrence.apply(*a, keep), args)


def _reference_recurrence(projected: torch.Tensor, recurrent: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
                          keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The LSTM recurrence step by step in plain autograd ops (gate order ``i, f, g, o``)."""
    outputs = []
    for t in range(projected.shape[0]):
        if keep is not None:
            h, c = h * keep[t], c * keep[t]
        i, f, g, o = (projected[t] + h @ recurrent.transpose(1, 2)).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs), h, c


@pytest.mark.parametrize("restarts", [False, True], ids=["no-restarts", "restarts"])
def test_recurrence_gradients_equal_autograd_through_the_loop(restarts: bool) -> None:
    """The hand-written node against autograd through the plain per-step loop, with a
    gradient arriving at every output (the sequence and the final state)."""
    tensors = _inputs(members=4, batch=8, steps=12, size=16, restarts=restarts, dtype=torch.float32)
    keep = tensors[-1]
    mine = [t.clone().requires_grad_() for t in tensors[:4]]
    theirs = [t.clone().requires_grad_() for t in tensors[:4]]
    hs, h, c = LstmRecurrence.apply(*mine, keep)
    ref_hs, ref_h, ref_c = _reference_recurrence(*theirs, keep)
    torch.testing.assert_close(hs, ref_hs)
    weights = [torch.randn_like(out, generator=torch.Generator().manual_seed(k)) for k, out in enumerate((hs, h, c))]
    sum((w * out).sum() for w, out in zip(weights, (hs, h, c), strict=True)).backward()
    sum((w * out).sum() for w, out in zip(weights, (ref_hs, ref_h, ref_c), strict=True)).backward()
    for a, b in zip(mine, theirs, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


def test_stack_equals_each_members_own_lstm_forward_and_backward() -> None:
    torch.manual_seed(0)
    layers = [LstmLayer(5, 16) for _ in range(3)]
    stack = StackedLstmLayer(layers)
    x = torch.randn(3, 4, 7, 5)
    state = (torch.randn(3, 1, 4, 16), torch.randn(3, 1, 4, 16))
    out, (h, c) = stack(x, state)
    (out.square().sum() + h.sum() + c.sum()).backward()
    for p, layer in enumerate(layers):
        ref, (ref_h, ref_c) = layer(x[p], (state[0][p], state[1][p]))
        torch.testing.assert_close(out[p], ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(h[p], ref_h, rtol=1e-5, atol=1e-5)
        (ref.square().sum() + ref_h.sum() + ref_c.sum()).backward()
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            mine = getattr(stack.lstm, name).grad[p]
            theirs = getattr(layer.lstm, name).grad
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_acting_step_equals_the_sequence_path_and_follows_weight_updates() -> None:
    """One step without gradients (the joined-weights path, its weights cached) computes what
    the recorded sequence path computes, for members of different widths and with restarts,
    and sees an in-place weight update (an optimizer step) at the next call."""
    torch.manual_seed(0)
    stack = StackedLstmLayer([LstmLayer(5, size) for size in (16, 12, 8)])
    x = torch.randn(3, 4, 1, 5)
    state = (torch.randn(3, 1, 4, 16), torch.randn(3, 1, 4, 16))
    starts = torch.tensor([True, False, False, True]).expand(3, 4).unsqueeze(-1)
    for _ in range(2):
        with torch.no_grad():
            acted, (h, c) = stack(x, state, starts)
        recorded, (ref_h, ref_c) = stack(x, state, starts)
        torch.testing.assert_close(acted, recorded.detach())
        torch.testing.assert_close((h, c), (ref_h.detach(), ref_c.detach()))
        with torch.no_grad():  # as an optimizer step would
            stack.lstm.weight_hh_l0.add_(0.1)
