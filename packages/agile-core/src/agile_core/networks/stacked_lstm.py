"""Population version of :class:`~agile_core.networks.lstm.LstmLayer`: ``P`` single-layer LSTMs
run as one computation on inputs with a leading member axis.

The members' ``nn.LSTM`` weights are stacked ``[P, 4H, in]`` / ``[P, 4H, H]`` / ``[P, 4H]`` under
the same names (``lstm.weight_ih_l0`` ...), each member's in the leading corner and zero-padded to
the widest member, so member binding, padding masks, Adam and checkpoints treat them as any
stacked weight. A member narrower than the widest has its four gate blocks ``i, f, g, o`` at rows
``[k H_p, (k + 1) H_p)``; every forward pass first gathers the rows into a gate-major layout with
``H`` rows per gate, the missing ones taken from padding rows (zero weights, so a padded unit's
gates read 0 and its state stays exactly zero). The input projection of every time step is then
one batched matmul, and the recurrence one autograd node (:class:`LstmRecurrence`) whose
backward pass is written by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agile_core.networks.lstm import HiddenState, LstmLayer
from agile_core.networks.stack_padding import NotStackableError, stack_padded

__all__ = ["LstmRecurrence", "StackedLstmLayer", "StackedLstmWeights"]

LSTM_WEIGHTS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def gate_major_rows(sizes: Sequence[int], device: torch.device | str | None = None) -> torch.Tensor | None:
    """``[P, 4 H]`` row indices that gather each member's gate blocks (rows ``[k H_p, (k + 1) H_p)``
    of a corner-padded ``[P, 4 H, ...]`` stack) into ``4`` blocks of ``H = max(sizes)`` rows, the
    units a member lacks read from its first padding row; None when every member is ``H`` wide."""
    widest = max(sizes)
    if all(size == widest for size in sizes):
        return None
    units = torch.arange(widest, device=device)
    rows = []
    for size in sizes:
        blocks = [torch.where(units < size, gate * size + units, torch.full_like(units, 4 * size)) for gate in range(4)]
        rows.append(torch.cat(blocks))
    return torch.stack(rows)


class StackedLstmWeights(nn.Module):
    """The members' ``nn.LSTM`` weights, stacked along a leading member axis (corner-padded),
    named as in ``nn.LSTM``."""

    weight_ih_l0: nn.Parameter
    weight_hh_l0: nn.Parameter
    bias_ih_l0: nn.Parameter
    bias_hh_l0: nn.Parameter
    gate_rows: torch.Tensor | None

    def __init__(self, lstms: Sequence[nn.LSTM]) -> None:
        super().__init__()
        if any(lstm.num_layers != 1 or lstm.bidirectional or lstm.proj_size or not lstm.bias for lstm in lstms):
            raise NotStackableError("only single-layer, one-way LSTMs with biases stack")
        self.sizes = [int(lstm.hidden_size) for lstm in lstms]
        self.hidden_size = max(self.sizes)
        self.input_size = max(int(lstm.input_size) for lstm in lstms)
        for name in LSTM_WEIGHTS:
            setattr(self, name, nn.Parameter(stack_padded([getattr(lstm, name) for lstm in lstms])))
        self.register_buffer("gate_rows", gate_major_rows(self.sizes, self.weight_ih_l0.device), persistent=False)

    def acting_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """For steps without gradients: ``(bias [P, 1, 4H], weight [P, in + H, 4H])``, the
        gate-major input and recurrent weights side by side (transposed), so one step's gates are
        one ``baddbmm`` of ``[x, h]``. Kept until an optimizer step changes the weights (the
        parameters' version counters), so collection pays for them once per update."""
        params = self._parameters
        versions = tuple((params[name]._version, params[name].data_ptr()) for name in LSTM_WEIGHTS)  # type: ignore[union-attr]
        cached = self.__dict__.get("_acting_weights")
        if cached is None or cached[0] != versions:
            with torch.no_grad():
                weight_ih, weight_hh, bias = self.gate_major()
                joined = torch.cat([weight_ih, weight_hh], dim=2).transpose(1, 2).contiguous()
            cached = (versions, (bias.unsqueeze(1), joined))
            self.__dict__["_acting_weights"] = cached
        return cached[1]

    def gate_major(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(weight_ih [P, 4H, in], weight_hh [P, 4H, H], bias [P, 4H])`` with ``H`` rows per gate."""
        bias = self.bias_ih_l0 + self.bias_hh_l0
        weights = (self.weight_ih_l0, self.weight_hh_l0, bias)
        rows: torch.Tensor | None = self.gate_rows
        if rows is None:
            return weights

        def gathered(weight: torch.Tensor) -> torch.Tensor:
            index = rows.reshape(*rows.shape, *([1] * (weight.dim() - 2)))
            return weight.gather(1, index.expand(-1, -1, *weight.shape[2:]))

        return gathered(weights[0]), gathered(weights[1]), gathered(weights[2])


class StackedLstmLayer(nn.Module):
    """``P`` :class:`LstmLayer` s: inputs ``[P, B, T, in]``, state ``(h, c)`` each ``[P, 1, B, H]``."""

    lstm: StackedLstmWeights

    def __init__(self, layers: Sequence[LstmLayer]) -> None:
        super().__init__()
        if len({layer.residual for layer in layers}) != 1:
            raise NotStackableError("residual and plain LSTM layers do not stack")
        self.lstm = StackedLstmWeights([layer.lstm for layer in layers])
        self.residual = layers[0].residual
        if self.residual:
            self.gate = nn.Parameter(stack_padded([layer.gate for layer in layers]))

    @property
    def hidden_size(self) -> int:
        """Size of the hidden and cell state (the widest member's)."""
        return self.lstm.hidden_size

    @property
    def input_size(self) -> int:
        """Features read per time step."""
        return self.lstm.input_size

    def forward(self, x: torch.Tensor, state: HiddenState,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, HiddenState]:
        """Run member ``p``'s layer over ``x[p]`` (``[B, T, in]``) from ``state[p]``; where `starts`
        (``[P, B, T]`` bool) is True the state is zeroed before that step. Returns outputs
        ``[P, B, T, H]`` and the final ``(h, c)``, each ``[P, 1, B, H]``."""
        members, batch, steps, inputs = x.shape
        if steps == 1 and not torch.is_grad_enabled():
            return self._act(x, state, starts)
        weight_ih, weight_hh, bias = self.lstm.gate_major()
        time_major = x.transpose(1, 2).reshape(members, steps * batch, inputs)
        projected = torch.baddbmm(bias.unsqueeze(1), time_major, weight_ih.transpose(1, 2))
        projected = projected.view(members, steps, batch, -1).transpose(0, 1)  # [T, P, B, 4H]
        keep = None if starts is None else (~starts).to(x.dtype).permute(2, 0, 1).unsqueeze(-1)  # [T, P, B, 1]
        h0, c0 = state[0][:, 0], state[1][:, 0]
        if torch.is_grad_enabled():
            hs, h, c = LstmRecurrence.apply(projected, weight_hh, h0, c0, keep)
        else:  # acting: no node to record
            hs, *_, h, c = _recur(projected, weight_hh, h0, c0, keep)
        out = hs.permute(1, 2, 0, 3)  # [P, B, T, H]
        if self.residual:
            out = x + self.gate.view(members, 1, 1, 1) * out
        return out, (h.unsqueeze(1), c.unsqueeze(1))

    def _act(self, x: torch.Tensor, state: HiddenState, starts: torch.Tensor | None) -> tuple[torch.Tensor, HiddenState]:
        """:meth:`forward` of one step without gradients (acting): the gates of ``[x, h]`` in one
        batched matmul against the cached joined weights."""
        members, batch, _, inputs = x.shape
        bias, weight = self.lstm.acting_weights()
        h, c = state[0][:, 0], state[1][:, 0]
        if starts is not None:
            keep = (~starts[:, :, 0]).to(x.dtype).unsqueeze(-1)
            h, c = h * keep, c * keep
        step = x.view(members, batch, inputs)
        gates = torch.baddbmm(bias, torch.cat([step, h], dim=-1), weight)
        h, c = _cell(gates, c, torch.empty_like(gates))
        out = h.unsqueeze(2)  # [P, B, 1, H]
        if self.residual:
            out = x + self.gate.view(members, 1, 1, 1) * out
        return out, (h.unsqueeze(1), c.unsqueeze(1))


def _cell(gates: torch.Tensor, c: torch.Tensor, act: torch.Tensor, *, c_out: torch.Tensor | None = None,
          tanh_c_out: torch.Tensor | None = None, h_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step from the gate pre-activations `gates` ``[P, B, 4H]`` (blocks ``i, f, g, o``)
    and the cell state `c`: writes the activations into `act` (``sigmoid``, ``tanh`` for ``g``)
    and, when given, the new cell state, its ``tanh`` and the new hidden state into the `*_out`
    tensors. Returns the new ``(h, c)``."""
    size = gates.shape[-1] // 4
    g_rows = slice(2 * size, 3 * size)
    torch.sigmoid(gates, out=act)
    torch.tanh(gates[..., g_rows], out=act[..., g_rows])
    i, f, g, o = act.chunk(4, dim=-1)
    c = torch.addcmul(f * c, i, g, out=c_out)
    return torch.mul(o, torch.tanh(c, out=tanh_c_out), out=h_out), c


def _recur(projected: torch.Tensor, recurrent: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
           keep: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """The LSTM recurrence over time-major gate inputs `projected` ``[T, P, B, 4H]`` with weights
    `recurrent` ``[P, 4H, H]`` from ``(h, c)`` ``[P, B, H]``: the outputs ``[T, P, B, H]``, the
    gate activations ``[T, P, B, 4H]`` (``sigmoid`` of ``i, f, o``, ``tanh`` of ``g``), the cell
    states and their ``tanh`` per step, and the final ``(h, c)``."""
    steps, _, _, width = projected.shape
    transposed = recurrent.transpose(1, 2)
    hs = projected.new_empty(*projected.shape[:3], width // 4)
    cs, tanh_c = torch.empty_like(hs), torch.empty_like(hs)
    acts = torch.empty_like(projected)
    restarts = [True] * steps if keep is None else (keep[:, :, :, 0] < 1).flatten(1).any(dim=1).tolist()
    for t in range(steps):
        if keep is not None and restarts[t]:
            h, c = h * keep[t], c * keep[t]
        gates = torch.baddbmm(projected[t], h, transposed)
        h, c = _cell(gates, c, acts[t], c_out=cs[t], tanh_c_out=tanh_c[t], h_out=hs[t])
    return hs, acts, cs, tanh_c, h, c


class LstmRecurrence(torch.autograd.Function):
    """The recurrence of :func:`_recur` with a hand-written backward pass: one autograd node for
    the whole sequence instead of a dozen per step, the weight gradient as one batched matmul
    over all steps. Inputs ``(projected [T, P, B, 4H], recurrent [P, 4H, H], h0, c0 [P, B, H],
    keep [T, P, B, 1] or None)``; outputs ``(hs [T, P, B, H], h, c)``."""

    @staticmethod
    def forward(ctx: Any, projected: torch.Tensor, recurrent: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor,
                keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hs, acts, cs, tanh_c, h, c = _recur(projected, recurrent, h0, c0, keep)
        ctx.save_for_backward(recurrent, h0, c0, hs, acts, cs, tanh_c, keep)
        return hs, h.clone(), c.clone()

    @staticmethod
    def backward(ctx: Any, d_hs: torch.Tensor | None, d_h: torch.Tensor | None,
                 d_c: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        recurrent, h0, c0, hs, acts, cs, tanh_c, keep = ctx.saved_tensors
        steps, size = hs.shape[0], hs.shape[-1]
        i, f, g, o = acts.chunk(4, dim=-1)
        # the states each step started from (zeroed at episode starts)
        c_prev = torch.cat([c0.unsqueeze(0), cs[:-1]])
        h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]])
        if keep is not None:
            c_prev, h_prev = c_prev * keep, h_prev * keep
        through_c = o * (1 - tanh_c * tanh_c)  # d h / d c
        derivative = acts * (1 - acts)
        derivative[..., 2 * size:3 * size] = 1 - g * g
        # d gates = [dc * g, dc * c_prev, dc * i, dh * tanh(c)] * derivative
        factors = torch.cat([g, c_prev, i, tanh_c], dim=-1) * derivative
        d_gates = torch.empty_like(acts)
        dh = torch.zeros_like(h0) if d_h is None else d_h.clone()
        dc = torch.zeros_like(c0) if d_c is None else d_c.clone()
        restarts = [False] * steps if keep is None else (keep[:, :, :, 0] < 1).flatten(1).any(dim=1).tolist()
        for t in range(steps - 1, -1, -1):
            if d_hs is not None:
                dh = dh + d_hs[t]
            dc = torch.addcmul(dc, dh, through_c[t])
            torch.mul(torch.cat([dc, dc, dc, dh], dim=-1), factors[t], out=d_gates[t])
            dh = torch.bmm(d_gates[t], recurrent)
            dc = dc * f[t]
            if restarts[t]:
                dh, dc = dh * keep[t], dc * keep[t]
        members, width = d_gates.shape[1], d_gates.shape[-1]
        d_recurrent = torch.bmm(d_gates.transpose(0, 1).reshape(members, -1, width).transpose(1, 2),
                                h_prev.transpose(0, 1).reshape(members, -1, size))
        return d_gates, d_recurrent, dh, dc, None
