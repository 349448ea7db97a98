"""Default rollout collection of the on-policy loop: fill a :class:`RolloutBuffer` from a vector env.

:func:`collect_rollouts` follows the buffer's row contract for Gymnasium 1.x next-step autoreset
(see :mod:`agile_onpolicy.rollout.buffer`):

* every vector step is one row; the row after a sub-env's episode ended is an *autoreset row*
  (``valid=False``): its action was ignored, its reward is 0 and it returned the reset
  observation;
* a valid step that truncated (and did not terminate) bootstraps from ``V(true final
  observation)``, which under next-step autoreset is the observation that step returned; it is
  passed as ``final_value`` (for a recurrent policy, evaluated with the state after that step);
* a recurrent policy's state is zeroed before the first row of every episode (the row after an
  autoreset row, or the first row after ``env.reset``), and the state fed at every row is
  stored with its ``episode_start`` flag so that BPTT replays exactly what was computed.

Everything that must survive between calls (the env's current observation and step info, the
autoreset and episode-start flags, the recurrent state, the episode returns in progress) lives
in a :class:`CollectState`. A loop keeps one per agent and env::

    state = None
    buffer = agent.create_rollout_buffer(env.num_envs)
    while training:
        state = collect_rollouts(agent, env, buffer, state=state)   # a full rollout
        losses = agent.learn(buffer)
        returns, lengths = state.pop_finished()

A state is tied to its env: when anything else steps or resets that env in between (another
agent, an evaluation with ``agent.test(env)``), start again with ``state=None``.

Mutations between (or in the middle of) rollouts are handled: a changed learning rate or
architecture needs nothing, except that a recurrent state whose LSTM size no longer matches the
agent (or that belongs to another agent object) is reset to zero, that point being flagged as an
episode start for every sub-env, and the buffer's stored states are migrated to the new size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from agile_core.training.envs import check_next_step_autoreset, swap_image_channels
from agile_core.training.episodes import EpisodeTracker
from agile_core.training.profiling import PROFILER
from agile_core.training.tensor_tree import map_tree
from agile_onpolicy.ppo import PPO
from agile_onpolicy.ppo_hidden import HiddenStates
from agile_onpolicy.rollout import RolloutBuffer
from agile_onpolicy.rollout.hidden import HiddenStateStore

__all__ = ["CollectState", "collect_rollouts", "fit_buffer_hidden_states"]


@dataclass
class CollectState:
    """What one agent's collection in one vector env carries from call to call.

    Attributes:
        obs: The observation the next step acts on (channels already swapped if asked).
        info: The info dict of the last ``reset``/``step`` (for ``action_mask``).
        episode_start: ``[num_envs]`` bool, True where the next row begins an episode
            (the recurrent state is zeroed before it).
        hidden: The recurrent state to feed at the next step (None for feed-forward agents).
        hidden_owner: ``id`` of the agent that produced `hidden` (a different agent resets it).
        tracker: Episode returns/lengths and the next-step autoreset flags.
        steps: Environment steps collected through this state (summed over sub-envs).
        swap_channels: Observations are moved from channels-last to channels-first.
    """

    obs: Any
    info: dict[str, Any]
    episode_start: np.ndarray
    tracker: EpisodeTracker
    hidden: HiddenStates | None = None
    hidden_owner: int | None = None
    steps: int = 0
    swap_channels: bool = False

    @classmethod
    def start(cls, env: VectorEnv, seed: int | None = None, swap_channels: bool = False) -> CollectState:
        """Reset `env` and return a fresh state acting on its first observations."""
        check_next_step_autoreset(env)
        obs, info = env.reset(seed=seed)
        num_envs = int(env.num_envs)
        return cls(obs=swap_image_channels(obs) if swap_channels else obs, info=dict(info),
                   episode_start=np.ones(num_envs, dtype=bool), tracker=EpisodeTracker(num_envs),
                   swap_channels=swap_channels)

    @property
    def autoreset(self) -> np.ndarray:
        """``[num_envs]`` bool: True where the next step is an autoreset step."""
        return self.tracker.autoreset

    def pop_finished(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes finished since the last call (then cleared)."""
        return self.tracker.pop_finished()


def _hidden_shapes(hidden: HiddenStates) -> dict[str, tuple[tuple[int, ...], ...]]:
    return {name: tuple(tuple(t.shape) for t in pair) for name, pair in hidden.items()}


def _ensure_hidden(agent: PPO, state: CollectState, num_envs: int) -> None:
    """Give `state` a recurrent state that fits `agent`, resetting it (an episode start for
    every sub-env) when it is missing, belongs to another agent or no longer fits the LSTMs."""
    expected = agent.hidden_state_shapes(num_envs)
    fits = (state.hidden is not None and state.hidden_owner == id(agent)
            and _hidden_shapes(state.hidden) == {k: tuple(v) for k, v in expected.items()})
    if not fits:
        state.hidden = agent.initial_hidden(num_envs)
        state.hidden_owner = id(agent)
        state.episode_start[:] = True


def fit_buffer_hidden_states(buffer: RolloutBuffer, agent: PPO) -> None:
    """Resize the recurrent-state storage of `buffer` to `agent`'s LSTMs, keeping stored rows.

    Stored states are zero-padded or cut (leading layers and units survive), which is exact
    for growth mutations (new units and residual layers start inert). A no-op when they fit.
    """
    store = getattr(buffer, "_hidden", None)
    if store is None:
        return
    shapes = agent.hidden_state_shapes(buffer.num_envs)
    old = store.storage  # leaves [num_steps, num_envs, layers, hidden]
    stored = {name: tuple((v.shape[2], v.shape[1], v.shape[3]) for v in pair) for name, pair in old.items()}
    if stored == {name: tuple(pair) for name, pair in shapes.items()}:
        return
    new = HiddenStateStore(shapes, buffer.num_steps, buffer.num_envs, buffer.device, store.batch_dim)

    def _copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        layers, width = min(dst.shape[2], src.shape[2]), min(dst.shape[3], src.shape[3])
        dst[:, :, :layers, :width] = src[:, :, :layers, :width]
        return dst

    map_tree(_copy, new.storage, old)
    buffer._hidden = new  # the buffer has no public resize yet


def collect_rollouts(
    agent: PPO,
    env: VectorEnv,
    buffer: RolloutBuffer,
    num_steps: int | None = None,
    state: CollectState | None = None,
    *,
    swap_channels: bool = False,
    seed: int | None = None,
) -> CollectState:
    """Step `env` with `agent` for `num_steps` vector steps, appending them to `buffer`.

    A full `buffer` is reset first (a new rollout); otherwise rows are appended, so a rollout
    can be collected in several calls (e.g. around a mutation). `num_steps` defaults to the
    room left in the buffer. With ``state=None`` the env is reset (with `seed`) and a new
    :class:`CollectState` is made (`seed` and `swap_channels` only apply then); the state to
    pass to the next call is returned. An ``action_mask`` in the step info is passed to the
    policy and stored with the row (as :meth:`PPO.prepare_action_mask` makes it), so that
    learning applies the same mask. After
    collecting, returns and advantages of the rows so far are computed with the agent's current
    ``gamma``/``gae_lambda``/``use_gae``, bootstrapping from ``V`` of the observation the next
    step will act on, so ``agent.learn(buffer)`` can follow directly. ``agent.steps`` and
    ``state.steps`` grow by ``num_steps * num_envs``.
    """
    if not isinstance(env, VectorEnv):
        raise TypeError(f"collect_rollouts needs a gymnasium VectorEnv (its autoreset bookkeeping must persist "
                        f"between calls), got {type(env).__name__}; wrap a plain env once with "
                        "agile_core.training.as_vector_env")
    if state is None:
        state = CollectState.start(env, seed=seed, swap_channels=swap_channels)
    num_envs = int(env.num_envs)
    if buffer.num_envs != num_envs:
        raise ValueError(f"buffer holds {buffer.num_envs} sub-envs but env has {num_envs}")
    if buffer.full:
        buffer.reset()
    room = buffer.num_steps - buffer.size
    num_steps = room if num_steps is None else int(num_steps)
    if not 0 < num_steps <= room:
        raise ValueError(f"num_steps must lie in [1, {room}] (room left in the buffer), got {num_steps}")
    if agent.recurrent:
        _ensure_hidden(agent, state, num_envs)
        fit_buffer_hidden_states(buffer, agent)

    for _ in range(num_steps):
        hidden = None
        with PROFILER.act:
            action_mask = agent.prepare_action_mask(state.info.get("action_mask"))
            if agent.recurrent:
                assert state.hidden is not None
                hidden = agent.mask_hidden(state.hidden, state.episode_start)
                action, log_prob, _, value, next_hidden = agent.get_action(state.obs, action_mask, hidden_state=hidden)
            else:
                action, log_prob, _, value = agent.get_action(state.obs, action_mask)
                next_hidden = None
            env_action = agent.to_env_action(action)
        with PROFILER.env:
            next_obs, reward, terminated, truncated, info = env.step(env_action)
        if state.swap_channels:
            next_obs = swap_image_channels(next_obs)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        valid = state.tracker.step(reward, terminated, truncated)

        # A valid truncation bootstraps from V(final observation) = V(next_obs) here.
        final_value = None
        if (valid & truncated & ~terminated).any():
            final_value = agent.get_value(next_obs, next_hidden)
        buffer.add(state.obs, action, reward, terminated, truncated, value, log_prob, valid,
                   hidden=hidden, episode_start=state.episode_start.copy() if agent.recurrent else None,
                   final_value=final_value, action_mask=action_mask)

        # The row after an autoreset row begins a new episode.
        state.episode_start = ~valid
        state.obs, state.info, state.hidden = next_obs, dict(info), next_hidden
        state.steps += num_envs
        agent.steps += num_envs

    with PROFILER.learn:  # advantages: the learning side, as in the population-batched phase
        hidden = agent.mask_hidden(state.hidden, state.episode_start) if agent.recurrent and state.hidden else None
        last_value = agent.get_value(state.obs, hidden)
        buffer.gamma, buffer.gae_lambda, buffer.use_gae = agent.gamma, agent.gae_lambda, agent.use_gae
        buffer.compute_returns_and_advantages(last_value, last_done=state.autoreset)
    return state
