"""`PettingZooVecEnv`: copies of a PettingZoo Parallel env stepped together, arrays per agent.

Layout (every per-agent quantity a ``dict[agent_id, array]`` over ``possible_agents``)::

    obs[agent]            float32 [num_envs, *obs_shape] (Dict / Tuple spaces: dict / tuple of
                          such arrays); zeros where the agent is absent
    rewards[agent]        float32 [num_envs]
    terminations[agent], truncations[agent]   bool [num_envs]
    info["alive"][agent]  bool: the agent is present after this call (it acts next step)
    info["valid"][agent]  bool (step): a real transition for the agent (alive before the step
                          and the sub-env not autoresetting)
    info["autoreset"]     bool [num_envs] (step): this step only reset the sub-env (Gymnasium 1.x
                          next-step autoreset: actions ignored, rewards 0, flags False)
    info["episode_over"]  bool [num_envs] (step): the sub-env's episode ended at this step
    info["action_mask"][agent]  bool [num_envs, n], for agents whose env gives action masks
                          (``infos[agent]["action_mask"]`` or ``obs[agent]["action_mask"]``);
                          all True where the agent is absent
    info["infos"]         per sub-env, the env's raw per-agent info dicts

The final observation of an agent that terminates or truncates at step t is its obs at step t;
later steps give zeros, alive False and valid False until the sub-env resets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from agile_marl.envs.batch import SubEnvBatch, VecOutputs
from agile_marl.envs.spaces import action_rows

EnvFn = Callable[[], Any]


class SharedEnv:
    """A factory returning one given env instance itself (a vector env around a ready env)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self) -> Any:
        return self.env


class CopiedEnv:
    """A factory returning a deep copy of an env instance (widening a vector env around it)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self) -> Any:
        return deepcopy(self.env)


def _space_seeds(seed: int, count: int) -> list[int]:
    return [int(child.generate_state(1)[0]) for child in np.random.SeedSequence(seed).spawn(count)]


class MultiAgentVecEnv:
    """What both vector envs share: spaces, seeding, action checks and the output layout.

    Subclasses build `self._out` (a `VecOutputs`) and implement `_reset` and `_step`.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP}
    render_mode: str | None = None

    def __init__(self, env_fns: Sequence[EnvFn], agents: list[str], observation_spaces: dict[str, spaces.Space],
                 action_spaces: dict[str, spaces.Space], copy: bool = True, seed: int | None = None) -> None:
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.agents = list(agents)
        self.possible_agents = self.agents
        self.observation_spaces = dict(observation_spaces)
        # copies: seeding or sampling them never touches a sub-env's own spaces
        self.action_spaces = {a: deepcopy(s) for a, s in action_spaces.items()}
        self.copy = copy
        self.closed = False
        self._pending_seed = seed
        self._out = VecOutputs.allocate(self.observation_spaces, self.action_spaces, self.num_envs)
        if seed is not None:
            self.seed_action_spaces(seed)

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, seeds: list[int | None], options: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def _step(self, actions: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def widened(self, copies: int) -> MultiAgentVecEnv:
        """A new vector env of the same kind with ``copies * num_envs`` sub-envs from the same
        factories (member p of a population owns sub-envs ``[p*num_envs, (p+1)*num_envs)``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the sub-envs."""
        raise NotImplementedError

    # ------------------------------------------------------------------ API
    def seed_action_spaces(self, seed: int) -> None:
        """Seed ``action_spaces[agent]`` (agent k with the k-th child of ``SeedSequence(seed)``)."""
        for agent, child in zip(self.agents, _space_seeds(seed, len(self.agents)), strict=True):
            self.action_spaces[agent].seed(child)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, Any]:
        """Reset every sub-env (sub-env i with ``seed + i``) and return ``(obs, info)``."""
        self._check_open()
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        else:
            self._pending_seed = None
        seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        if seed is not None:
            self.seed_action_spaces(seed)
        self._reset(seeds, options)
        obs, info = self._out.result(self.copy, step=False)
        return obs, info

    def step(self, actions: dict[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
        """Step every sub-env; ``actions[agent]`` is ``[num_envs, *action_shape]`` (ints for
        Discrete). Entries of absent agents and of autoresetting sub-envs are ignored."""
        self._check_open()
        self._step(self._action_arrays(actions))
        return self._out.result(self.copy, step=True)

    def sample_actions(self) -> dict[str, np.ndarray]:
        """Random actions ``[num_envs, ...]`` per agent from ``action_spaces`` (respecting the
        current action masks)."""
        actions = {}
        for agent in self.agents:
            space = self.action_spaces[agent]
            masks = self._out.action_mask.get(agent) if agent in self._out.masked else None
            if masks is not None and isinstance(space, spaces.Discrete):
                rows = [space.sample(mask=m.astype(np.int8) if m.any() else None) for m in masks]
            else:
                rows = [space.sample() for _ in range(self.num_envs)]
            actions[agent] = np.asarray(rows)
        return actions

    def _action_arrays(self, actions: dict[str, Any]) -> dict[str, np.ndarray]:
        out = self._out
        arrays = {}
        acting = ~out.episode_over  # sub-envs that step (not autoreset) this call
        for agent in self.agents:
            if agent in actions:
                arrays[agent] = action_rows(self.action_spaces[agent], actions[agent], self.num_envs, agent)
            elif (out.alive[agent] & acting).any():
                raise KeyError(f"step(): no actions for agent {agent!r}, which is alive in sub-envs "
                               f"{np.flatnonzero(out.alive[agent] & acting).tolist()}")
        return arrays

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _widened_fns(self, copies: int) -> list[EnvFn]:
        if copies < 1:
            raise ValueError(f"copies must be >= 1, got {copies}")
        fns = [CopiedEnv(fn.env) if isinstance(fn, SharedEnv) else fn for fn in self.env_fns]
        return fns * copies

    def __enter__(self) -> MultiAgentVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, agents={self.agents})"



class PettingZooVecEnv(MultiAgentVecEnv):
    """Sub-envs stepped one after another in this process.

    Args:
        env_fns: one zero-argument factory per sub-env (each returns a PettingZoo ParallelEnv).
        copy: return fresh arrays from each call (True) or the internal buffers, which the
            next call overwrites (False).
        seed: seeds the action spaces now and is the seed of the first ``reset()`` without one.
    """

    def __init__(self, env_fns: Sequence[EnvFn], copy: bool = True, seed: int | None = None) -> None:
        envs = [fn() for fn in env_fns]
        self._batch = SubEnvBatch(envs)
        self.envs = envs
        super().__init__(env_fns, self._batch.agents, self._batch.observation_spaces,
                         self._batch.action_spaces, copy=copy, seed=seed)
        self._out = self._batch.out

    @classmethod
    def from_env(cls, env: Any, copy: bool = True) -> PettingZooVecEnv:
        """A one-sub-env vector env around a ready ParallelEnv instance (shared, not copied;
        :meth:`widened` deep-copies it)."""
        return cls([SharedEnv(env)], copy=copy)

    def _reset(self, seeds: list[int | None], options: dict[str, Any] | None) -> None:
        self._batch.reset(seeds, options)

    def _step(self, actions: dict[str, np.ndarray]) -> None:
        self._batch.step(actions)

    def widened(self, copies: int) -> PettingZooVecEnv:
        return PettingZooVecEnv(self._widened_fns(copies), copy=self.copy)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._batch.close()


def as_vec_env(env: Any) -> MultiAgentVecEnv:
    """`env` itself when it is a multi-agent vector env, else a one-sub-env `PettingZooVecEnv`
    around the ParallelEnv instance (shared; widening deep-copies it)."""
    if isinstance(env, MultiAgentVecEnv):
        return env
    if all(hasattr(env, a) for a in ("possible_agents", "reset", "step", "observation_space", "action_space")):
        return PettingZooVecEnv.from_env(env)
    raise TypeError(f"expected a PettingZoo ParallelEnv or a multi-agent vector env, got {type(env).__name__}")
