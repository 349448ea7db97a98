"""`agile evaluate CHECKPOINT --env ID`: mean and std of a saved agent's greedy return."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    """Add the `evaluate` subcommand."""
    parser = sub.add_parser(
        "evaluate",
        help="evaluate a saved agent",
        description="Run a saved agent (e.g. RUN_DIR/elite) greedily and print its mean and std return.",
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="agent checkpoint directory")
    parser.add_argument("--env", required=True, metavar="ID",
                        help="Gymnasium environment id, or a PettingZoo env module for multi-agent "
                             "agents (e.g. mpe2.simple_spread_v3)")
    parser.add_argument("--env-config", default=None, metavar="JSON",
                        help="keyword arguments of the environment's constructor as a JSON object, "
                             "e.g. '{\"continuous_actions\": true}'")
    parser.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the evaluation episodes")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run)


def make_env(agent: Any, env_id: str, config: dict[str, Any]) -> Any:
    """One sub-env of `env_id` of the kind the agent's paradigm trains in (Gymnasium by default)."""
    from agile_core.registry import UnknownAlgorithmError, paradigm_of

    try:
        paradigm = paradigm_of(type(agent).__name__)
    except UnknownAlgorithmError:
        paradigm = None
    if paradigm is not None and "make_env" in paradigm.hooks:
        spec = paradigm.env_spec.model_validate({"name": env_id, "num_envs": 1, "config": config})
        return paradigm.load_attr("make_env")(spec)
    import gymnasium as gym

    return gym.make_vec(env_id, num_envs=1, vectorization_mode="sync", **config)


class SpacesMismatchError(ValueError):
    """The env's spaces are not the ones the agent was trained for."""


def check_spaces_match(agent: Any, env: Any, env_id: str) -> None:
    """Raise SpacesMismatchError naming both spaces when `env` does not fit `agent`."""
    for name, env_name in (("observation_space", "single_observation_space"), ("action_space", "single_action_space"),
                           ("observation_spaces", "single_observation_spaces"), ("action_spaces", "single_action_spaces")):
        expected, actual = getattr(agent, name, None), getattr(env, env_name, None)
        if expected is not None and actual is not None and expected != actual:
            label = name.replace("_", " ")
            raise SpacesMismatchError(f"the spaces of {env_id} do not match the agent's: its {label} is {actual}, "
                                      f"the agent was trained on {expected}")


def episode_returns(agent: Any, env_id: str, episodes: int, seed: int,
                    config: dict[str, Any] | None = None) -> list[float]:
    """`episodes` greedy episodes, one at a time, through the agent's own `test` (so recurrent
    and continuous agents evaluate exactly as in training)."""
    env = make_env(agent, env_id, config or {})
    try:
        check_spaces_match(agent, env, env_id)
    except SpacesMismatchError:
        env.close()
        raise
    env.reset(seed=seed)  # later resets continue this seeded stream: distinct, repeatable episodes
    try:
        return [float(agent.test(env, loop=1)) for _ in range(episodes)]
    finally:
        env.close()


def run(args: argparse.Namespace) -> int:
    """Load, evaluate, print; exit 2 for an unusable checkpoint or env."""
    import numpy as np

    from agile_core.algorithms.base import EvolvableAlgorithm
    from agile_core.checkpoint import CheckpointError

    if args.episodes < 1:
        print("agile evaluate: --episodes must be >= 1", file=sys.stderr)
        return 2
    try:
        config = json.loads(args.env_config) if args.env_config else {}
    except json.JSONDecodeError as exc:
        print(f"agile evaluate: --env-config is not valid JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(config, dict):
        print("agile evaluate: --env-config must be a JSON object", file=sys.stderr)
        return 2
    try:
        agent = EvolvableAlgorithm.load(args.checkpoint)
    except CheckpointError as exc:
        print(f"agile evaluate: {exc}", file=sys.stderr)
        return 2
    try:
        returns = episode_returns(agent, args.env, args.episodes, args.seed, config)
    except SpacesMismatchError as exc:
        print(f"agile evaluate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"agile evaluate: cannot run {args.env}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    result = {"checkpoint": args.checkpoint, "env": args.env, "episodes": args.episodes,
              "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns))}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.env}: mean return {result['mean_return']:.2f} ± {result['std_return']:.2f} "
              f"over {args.episodes} episodes")
    return 0
