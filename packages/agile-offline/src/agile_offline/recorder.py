"""Roll a policy out in a Gymnasium environment and keep the transitions as a `TransitionData`.

The policy is uniform random (`policy=None`) or a trained agent acting greedily, either mixed
with uniform random actions at rate `epsilon`. Every environment is driven as a vector env
with Gymnasium's next-step autoreset (a plain env becomes a one-sub-env vector env): the step
after an episode ended is the reset and is not stored. Each sub-env's episode is kept together,
so the table holds whole, contiguous episodes in the order they finished.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.logging.progress import ProgressBar
from agile_core.training.envs import as_vector_env, check_next_step_autoreset
from agile_offline.datasets import TransitionData, from_arrays
from agile_offline.datasets.spaces import describe_space

__all__ = ["greedy_policy", "record"]

ActFn = Callable[[Any, dict[str, Any], np.ndarray], np.ndarray]
"""``act(obs, info, episode_start) -> actions``: batched env actions for batched observations;
`episode_start` (``[num_envs]`` bool) marks sub-envs whose episode starts with this observation."""

_Transition = tuple[Any, Any, float, Any, bool, bool]


@runtime_checkable
class ActingAgent(Protocol):
    """An agent recorded through its own acting rule (rather than a plain ``act`` callable)."""

    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        """Actions for a batch of observations (the greedy one with the arguments :func:`greedy_policy` picks)."""
        ...


@runtime_checkable
class RecurrentAgent(Protocol):
    """An agent whose policy may carry a recurrent state (PPO): with `recurrent` true its
    ``get_action`` takes ``hidden_state`` and returns the new one, zeroed by `mask_hidden`."""

    recurrent: bool

    def mask_hidden(self, hidden: Any, reset: Any) -> Any:
        """`hidden` with the state of the sub-envs where `reset` is true zeroed."""
        ...


@runtime_checkable
class ConvertsActions(Protocol):
    """An agent whose ``get_action`` gives policy outputs that ``to_env_action`` turns into env actions (PPO)."""

    def to_env_action(self, action: Any) -> np.ndarray:
        """The env action of a policy output."""
        ...


def _row(value: Any, index: int) -> Any:
    if isinstance(value, dict):
        return {key: np.array(item[index]) for key, item in value.items()}
    return np.array(value[index])


def _stack(rows: list[Any]) -> Any:
    if isinstance(rows[0], dict):
        return {key: np.stack([row[key] for row in rows]) for key in rows[0]}
    return np.stack(rows)


def _mask_of(info: dict[str, Any]) -> Any:
    return info.get("action_mask") if isinstance(info, dict) else None


def greedy_policy(agent: ActingAgent) -> ActFn:
    """The greedy acting rule of a single-agent algorithm, through its own ``get_action``:
    ``deterministic=True`` (PPO), ``training=False`` (DDPG, TD3, Rainbow) or ``epsilon=0`` (DQN),
    whichever it takes; tuple results give their first item, converted by ``to_env_action``
    when the agent has one. A recurrent agent keeps its hidden state, zeroed at episode starts."""
    params = inspect.signature(agent.get_action).parameters
    kwargs: dict[str, Any] = {}
    if "deterministic" in params:
        kwargs["deterministic"] = True
    elif "training" in params:
        kwargs["training"] = False
    elif "epsilon" in params:
        kwargs["epsilon"] = 0.0
    recurrent = (agent if isinstance(agent, RecurrentAgent) and bool(agent.recurrent) and "hidden_state" in params
                 else None)
    state: dict[str, Any] = {"hidden": None}

    def act(obs: Any, info: dict[str, Any], episode_start: np.ndarray) -> np.ndarray:
        call = dict(kwargs)
        mask = _mask_of(info)
        if mask is not None and "action_mask" in params:
            call["action_mask"] = mask
        if recurrent is not None:
            hidden = state["hidden"]
            if hidden is not None and episode_start.any():
                hidden = recurrent.mask_hidden(hidden, episode_start)
            call["hidden_state"] = hidden
        out = agent.get_action(obs, **call)
        if isinstance(out, tuple):
            if recurrent is not None:
                state["hidden"] = out[4]
            out = out[0]
            if isinstance(agent, ConvertsActions):
                out = agent.to_env_action(out)
        if hasattr(out, "detach"):  # a torch tensor
            out = out.detach().cpu().numpy()
        return np.asarray(out)

    return act


def _same_space(mine: gym.Space, theirs: gym.Space) -> bool:
    if type(mine) is not type(theirs) or mine.shape != theirs.shape:
        return False
    if isinstance(mine, gym.spaces.Discrete) and isinstance(theirs, gym.spaces.Discrete):
        return (int(mine.n), int(mine.start)) == (int(theirs.n), int(theirs.start))
    if isinstance(mine, gym.spaces.Dict) and isinstance(theirs, gym.spaces.Dict):
        return set(mine.spaces) == set(theirs.spaces) and all(
            _same_space(sub, theirs.spaces[key]) for key, sub in mine.spaces.items())
    return True


def _check_agent_spaces(agent: ActingAgent, env: VectorEnv) -> None:
    if not isinstance(agent, SingleAgentAlgorithm):
        return
    for what, mine, theirs in (("observation", agent.observation_space, env.single_observation_space),
                               ("action", agent.action_space, env.single_action_space)):
        if not _same_space(mine, theirs):
            raise ValueError(f"the agent ({type(agent).__name__}) acts in {what} space {describe_space(mine)}, "
                             f"the environment's is {describe_space(theirs)}")


def _make_env(env: str | gym.Env | VectorEnv, env_config: dict[str, Any] | None) -> tuple[VectorEnv, bool]:
    """The vector env to drive, and whether this function created it (and must close it)."""
    if isinstance(env, str):
        return as_vector_env(gym.make(env, **(env_config or {}))), True
    if env_config:
        raise ValueError("env_config applies to an env id only; configure a ready-made env when creating it")
    if isinstance(env, VectorEnv | gym.Env):
        return as_vector_env(env), False
    raise TypeError(f"expected a Gymnasium env id, Env or VectorEnv, got {type(env).__name__}")


def record(env: str | gym.Env | VectorEnv, policy: Any = None, *, episodes: int | None = None,
           steps: int | None = None, epsilon: float = 0.0, seed: int | None = None,
           env_config: dict[str, Any] | None = None, progress: bool = True) -> TransitionData:
    """Roll out `policy` in `env` and return the transitions of the complete episodes.

    Args:
        env: A Gymnasium env id (made with ``gym.make(env, **env_config)`` and closed at the end),
            an ``Env`` or a ``VectorEnv`` with next-step autoreset (left open).
        policy: None for uniform random actions; an agent (``EvolvableAlgorithm``) acting
            greedily (see :func:`greedy_policy`); or a callable ``act(obs, info, episode_start)``
            giving batched actions for batched observations.
        episodes: Stop after exactly this many complete episodes.
        steps: Stop at the first episode end at which at least this many transitions are stored
            (the count is rounded up to whole episodes). Give exactly one of `episodes`/`steps`.
        epsilon: Probability, per step and sub-env, of a uniform random action instead of the
            policy's.
        seed: Seeds the first reset (sub-env ``i`` gets ``seed + i``), the action space and the
            epsilon draws; the same seed and policy give the same data.
        env_config: Keyword arguments of ``gym.make`` when `env` is an id.
        progress: Show a progress bar on a terminal (core's ``ProgressBar``).

    Episodes that are still running when the target is reached are dropped, so the env must end
    its episodes (registered envs carry a ``TimeLimit``; pass ``max_episode_steps`` in
    `env_config` otherwise). Terminations and truncations are stored as the env reports them (a
    ``TimeLimit`` cut is a truncation; a terminal state on the cut step is both). With several
    sub-envs, dropping the episodes in flight slightly favours short episodes; a plain env (one
    sub-env) has no such bias, at the price of one policy call per step.
    """
    if (episodes is None) == (steps is None):
        raise ValueError("give exactly one of episodes or steps")
    target = int(episodes if episodes is not None else steps)  # type: ignore[arg-type]
    if target < 1:
        raise ValueError(f"{'episodes' if episodes is not None else 'steps'} must be >= 1, got {target}")
    if not 0.0 <= float(epsilon) <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    vec, owned = _make_env(env, env_config)
    try:
        check_next_step_autoreset(vec)
        if policy is None or (callable(policy) and not isinstance(policy, ActingAgent)):
            act = policy
        else:
            _check_agent_spaces(policy, vec)
            act = greedy_policy(policy)
        episodes_list = _rollout(vec, act, by_episodes=episodes is not None, target=target, epsilon=float(epsilon),
                                 seed=seed, progress=progress)
    finally:
        if owned:
            vec.close()
    rows = [transition for episode in episodes_list for transition in episode]
    name = env if isinstance(env, str) else type(env).__name__
    return from_arrays(
        f"recording in {name}",
        observations=_stack([t[0] for t in rows]), actions=np.stack([t[1] for t in rows]),
        rewards=np.asarray([t[2] for t in rows], dtype=np.float32), next_observations=_stack([t[3] for t in rows]),
        terminations=np.asarray([t[4] for t in rows], dtype=bool),
        truncations=np.asarray([t[5] for t in rows], dtype=bool))


def _rollout(vec: VectorEnv, act: ActFn | None, *, by_episodes: bool, target: int, epsilon: float,
             seed: int | None, progress: bool) -> list[list[_Transition]]:
    n = vec.num_envs
    rng = np.random.default_rng(seed)
    vec.action_space.seed(seed)
    obs, info = vec.reset(seed=seed)
    episode_start = np.ones(n, dtype=bool)
    autoreset = np.zeros(n, dtype=bool)
    pending: list[list[_Transition]] = [[] for _ in range(n)]
    finished: list[list[_Transition]] = []
    stored = 0
    bar = ProgressBar(target, desc="recording", unit="episodes" if by_episodes else "transitions",
                      enabled=None if progress else False)
    with bar:
        while True:
            if act is None:
                actions = vec.action_space.sample()
            else:
                actions = np.asarray(act(obs, info, episode_start))
                if epsilon > 0.0:
                    explore = rng.random(n) < epsilon
                    if explore.any():
                        actions = np.array(actions, copy=True)
                        actions[explore] = np.asarray(vec.action_space.sample())[explore]
            next_obs, rewards, terminations, truncations, info = vec.step(actions)
            ended = np.logical_or(terminations, truncations)
            for i in range(n):
                if autoreset[i]:  # this step only reset sub-env i
                    continue
                pending[i].append((_row(obs, i), np.array(actions[i]), float(rewards[i]), _row(next_obs, i),
                                   bool(terminations[i]), bool(truncations[i])))
                if ended[i]:
                    finished.append(pending[i])
                    stored += len(pending[i])
                    pending[i] = []
                    bar.set(len(finished) if by_episodes else stored)
                    if (len(finished) if by_episodes else stored) >= target:
                        return finished
            episode_start = autoreset.copy()  # sub-envs that reset in this step start an episode now
            autoreset = ended
            obs = next_obs
