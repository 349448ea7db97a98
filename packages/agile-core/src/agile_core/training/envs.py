"""Vector-environment helpers: every loop works on a Gymnasium ``VectorEnv`` with next-step autoreset."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv


def as_vector_env(env: gym.Env | VectorEnv) -> VectorEnv:
    """Return `env` itself when it is a vector env, else a one-sub-env ``SyncVectorEnv`` around it.

    The wrapper shares the given env instance (it is not copied); closing the wrapper closes it.
    """
    if isinstance(env, VectorEnv):
        return env
    if isinstance(env, gym.Env):
        wrapper = SyncVectorEnv([lambda: env])
        wrapper.agile_shared_instance = True  # type: ignore[attr-defined]  # its factory returns `env` itself
        return wrapper
    raise TypeError(f"expected a gymnasium Env or VectorEnv, got {type(env).__name__}")


def check_next_step_autoreset(env: VectorEnv) -> None:
    """Raise ValueError unless `env` uses Gymnasium's default next-step autoreset.

    The loops rely on it: the step after a sub-env's episode ends returns the reset observation
    (with reward 0) and is not a real transition. Same-step and disabled autoreset are rejected.
    """
    mode = (env.metadata or {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.NEXT_STEP.value):
        raise ValueError(
            f"the training loops need a vector env with autoreset_mode=NEXT_STEP (Gymnasium's default), "
            f"got {mode!r}; create it with gymnasium.make_vec(...) or "
            f"vector_kwargs={{'autoreset_mode': gymnasium.vector.AutoresetMode.NEXT_STEP}}"
        )


def swap_image_channels(obs: Any) -> Any:
    """Move the channel axis of batched channels-last images ``[N, H, W, C]`` to ``[N, C, H, W]``.

    Arrays with fewer than four dimensions (vectors, batched scalars) pass unchanged; dicts and
    tuples of observations are swapped leaf by leaf.
    """
    if isinstance(obs, dict):
        return {key: swap_image_channels(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(swap_image_channels(value) for value in obs)
    array = np.asarray(obs)
    return np.moveaxis(array, -1, -3) if array.ndim >= 4 else array


def population_vector_env(env: VectorEnv, agents: int) -> VectorEnv | None:
    """A vector env like `env` with ``agents`` times its sub-envs (one slice per agent), or None
    when `env` cannot be rebuilt (then the loops step agents one by one in `env`).

    Rebuilt: Gymnasium's native vector envs (``vector_entry_point``), ``SyncVectorEnv``s whose
    factories make a fresh env per call, and the wrapped native envs
    :func:`~agile_core.environments.make_vector_env` builds (they carry ``agile_widen``, a
    function of the sub-env count). Subprocess envs and other wrapped vector envs are not. The new
    env is reset with a seed drawn from `env`'s own RNG, so a seeded `env` gives a reproducible run.
    """
    if agents == 1:
        return env
    if getattr(env, "agile_shared_instance", False):
        return None
    count = env.num_envs * agents
    widened: VectorEnv | None = None
    widen = vars(env).get("agile_widen")  # set on this very object, not forwarded from a wrapped env
    if callable(widen):
        widened = widen(num_envs=count)
    elif type(env) is SyncVectorEnv:
        widened = SyncVectorEnv(list(env.env_fns) * agents, copy=env.copy, observation_mode=env.observation_mode,
                                autoreset_mode=AutoresetMode.NEXT_STEP)
    spec = env.spec
    if (widened is None and env.unwrapped is env and spec is not None and spec.vector_entry_point is not None
            and spec.kwargs.get("vectorization_mode") == "vector_entry_point"):
        kwargs = {k: v for k, v in spec.kwargs.items() if k not in ("num_envs", "vectorization_mode")}
        widened = gym.make_vec(spec.id, num_envs=count, vectorization_mode="vector_entry_point", **kwargs)
    if widened is not None:
        widened.reset(seed=_seed_drawn_from(env))
    return widened


def _seed_drawn_from(env: VectorEnv) -> int:
    """A seed from the RNG of `env` (its first sub-env when it has sub-envs)."""
    envs = getattr(env, "envs", None)
    source = envs[0] if envs else env
    return int(source.np_random.integers(2**31 - 1))
