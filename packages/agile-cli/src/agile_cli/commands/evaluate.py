"""`agile evaluate CHECKPOINT`: how well a saved agent does.

RL agents (`--env ID`): mean and std of the greedy return. LLM agents (SFT, DPO, GRPO, ...):
mean reward or loss/accuracy on the test split of the training manifest's data (`--manifest`, or
the run directory's `manifest.resolved.json`), through `agile_llm.evaluation`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agile_core.cli_types import device, int_in

MAX_EPISODES = 100_000
"""Most evaluation episodes one command runs (a typo such as 1e9 would otherwise run for days)."""


def register(sub: Any) -> None:
    """Add the `evaluate` subcommand."""
    parser = sub.add_parser(
        "evaluate",
        help="evaluate a saved agent",
        description="Run a saved agent (e.g. RUN_DIR/elite) greedily and print its mean and std return "
                    "(RL agents, --env), or its mean reward or loss/accuracy on the test split of its "
                    "training data (LLM agents, --manifest or the run directory's manifest).",
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT",
                        help="agent checkpoint directory; for LLM agents also a run checkpoint, checkpoint "
                             "folder or run directory (every member is evaluated)")
    parser.add_argument("--env", default=None, metavar="ID",
                        help="RL agents (required): Gymnasium environment id, or a PettingZoo env module for "
                             "multi-agent agents (e.g. mpe2.simple_spread_v3)")
    parser.add_argument("--manifest", default=None, metavar="MANIFEST",
                        help="LLM agents: the training manifest whose environment section gives the data "
                             "(default: RUN_DIR/manifest.resolved.json of the run the checkpoint is in)")
    parser.add_argument("--member", type=int, default=None, metavar="SLOT",
                        help="LLM run checkpoints: evaluate only the member in this population slot")
    parser.add_argument("--device", type=device, default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--env-config", default=None, metavar="JSON",
                        help="keyword arguments of the environment's constructor as a JSON object, "
                             "e.g. '{\"continuous_actions\": true}'")
    parser.add_argument("--episodes", type=int_in(1, MAX_EPISODES), default=None, metavar="N",
                        help=f"episodes, 1 to {MAX_EPISODES:,} (RL default 10; LLM rollout algorithms default: "
                             "every held-out prompt; not for SFT/DPO, which use the whole test split)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the evaluation episodes (RL agents)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run)


def make_env(agent: Any, env_id: str, config: dict[str, Any]) -> Any:
    """One sub-env of `env_id` of the kind the agent's paradigm trains in (Gymnasium by default)."""
    from agile_core.registry import UnknownAlgorithmError, paradigm_of

    try:
        paradigm = paradigm_of(type(agent).__name__)
    except UnknownAlgorithmError:
        paradigm = None
    if paradigm is not None and paradigm.builds_envs:
        spec = paradigm.env_spec.model_validate({"name": env_id, "num_envs": 1, "config": config})
        return paradigm.make_env(spec)
    import gymnasium as gym

    from agile_core.environments.extras import register_env_namespace

    register_env_namespace(env_id)  # `ALE/...`: import ale-py (a missing one: ImportError with the install command)
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


def llm_evaluator(path: str) -> Any:
    """The checkpoint evaluator of the paradigm that saved `path` when it has its own (LLM
    paradigms: :meth:`~agile_core.registry.Paradigm.checkpoint_evaluator`); None for RL agents
    or unreadable paths."""
    from agile_core.checkpoint import CheckpointError, inspect_checkpoint
    from agile_core.registry import UnknownAlgorithmError, paradigm_of
    from agile_core.training.checkpointing import resolve_run_checkpoint

    try:
        metadata = inspect_checkpoint(resolve_run_checkpoint(path)).metadata
        agents = metadata.get("agents") or [metadata]
        algorithm = str(agents[0].get("algorithm", "")).rpartition(":")[2]
    except (CheckpointError, OSError):
        algorithm = _run_directory_algorithm(path)  # a run directory without a checkpoint: say so
    try:
        paradigm = paradigm_of(algorithm)
    except UnknownAlgorithmError:
        return None
    return paradigm.checkpoint_evaluator()


def _run_directory_algorithm(path: str) -> str:
    """The algorithm of the run directory `path` (from its ``manifest.resolved.json``), else ""."""
    from pathlib import Path

    try:
        data = json.loads((Path(path) / "manifest.resolved.json").read_text(encoding="utf-8"))
        return str(data["algorithm"]["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def run(args: argparse.Namespace) -> int:
    """Evaluate an LLM or an RL checkpoint (exit 2 for unusable input)."""
    if args.episodes is not None and args.episodes < 1:
        print("agile evaluate: --episodes must be >= 1", file=sys.stderr)
        return 2
    evaluator = llm_evaluator(args.checkpoint)
    if evaluator is not None:
        return run_llm(args, evaluator)
    for flag, value in (("--manifest", args.manifest), ("--member", args.member)):
        if value is not None:
            print(f"agile evaluate: {flag} applies to LLM checkpoints; {args.checkpoint} is not one "
                  "(RL agents evaluate on --env)", file=sys.stderr)
            return 2
    return run_rl(args)


def run_llm(args: argparse.Namespace, evaluator: Any) -> int:
    """Mean reward or loss/accuracy of the LLM agent(s) on the manifest's test split."""
    import os
    import traceback

    if args.env is not None:
        print("agile evaluate: --env does not apply to LLM checkpoints: their data come from --manifest "
              "(default: the run directory's manifest.resolved.json)", file=sys.stderr)
        return 2
    from agile_llm.evaluation import EvaluationError

    try:
        result = evaluator(args.checkpoint, args.manifest, episodes=args.episodes, device=args.device,
                           member=args.member)
    except EvaluationError as exc:
        print(f"agile evaluate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a failing reward function or environment: concise, traceback on request
        print(f"agile evaluate: evaluation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("AGILE_DEBUG"):
            traceback.print_exc()
        else:
            print("(set AGILE_DEBUG=1 for the full traceback)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
        return 0
    for member in result.get("members", [result]):
        prefix = f"slot {member['slot']}: " if "slot" in member else ""
        print(prefix + describe_llm_result(member))
    if "members" in result:
        print(f"best: slot {result['best_member']}")
    return 0


def describe_llm_result(result: dict[str, Any]) -> str:
    """One human line for one LLM agent's result."""
    who = f"{result['algorithm']} agent {result['agent_id']}"
    if result["metric"] == "mean_reward":
        spread = "" if result.get("std_reward") is None else f" ± {result['std_reward']:.3f}"
        line = f"{who}: mean reward {result['mean_reward']:.3f}{spread} over {result['episodes']} held-out episodes"
        if result.get("accuracy") is not None:
            line += f", {result['accuracy']:.0%} reaching max_reward {result['max_reward']:g}"
        return line
    if result["metric"] == "fitness":
        return f"{who}: fitness {result['fitness']:.4f} on the test split"
    if result["metric"] == "loss":
        return (f"{who}: test loss {result['loss']:.4f}, greedy-match accuracy {result['accuracy']:.3f} over "
                f"{result['examples']} held-out examples")
    return (f"{who}: preference accuracy {result['accuracy']:.3f}, test loss {result['loss']:.4f}, mean margin "
            f"{result['margin']:.3f} over {result['pairs']} held-out pairs")


def run_rl(args: argparse.Namespace) -> int:
    """Load an RL agent, run greedy episodes, print; exit 2 for an unusable checkpoint or env."""
    import numpy as np

    from agile_core.algorithms.base import EvolvableAlgorithm
    from agile_core.checkpoint import CheckpointError

    episodes = 10 if args.episodes is None else args.episodes
    try:
        config = json.loads(args.env_config) if args.env_config else {}
    except json.JSONDecodeError as exc:
        print(f"agile evaluate: --env-config is not valid JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(config, dict):
        print("agile evaluate: --env-config must be a JSON object", file=sys.stderr)
        return 2
    try:
        agent = EvolvableAlgorithm.load(args.checkpoint, device=args.device)
    except CheckpointError as exc:
        print(f"agile evaluate: {exc}", file=sys.stderr)
        return 2
    if args.env is None:
        print("agile evaluate: --env ID is required for RL agents (the environment to run the agent in)",
              file=sys.stderr)
        return 2
    try:
        returns = episode_returns(agent, args.env, episodes, args.seed, config)
    except SpacesMismatchError as exc:
        print(f"agile evaluate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"agile evaluate: cannot run {args.env}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    result = {"checkpoint": args.checkpoint, "env": args.env, "episodes": episodes,
              "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns))}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.env}: mean return {result['mean_return']:.2f} ± {result['std_return']:.2f} "
              f"over {episodes} episodes")
    return 0
