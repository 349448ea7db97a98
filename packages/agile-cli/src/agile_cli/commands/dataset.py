"""`agile dataset record|info`: record offline RL datasets from a policy; summarise a dataset.

Needs the agile-offline package (imported only when a subcommand runs, so `agile --help`
stays fast and agile-cli does not depend on it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

_INSTALL = ("agile dataset: needs the agile-offline package (install it with `pip install 'agile-cli[dataset]'` "
            "or `pip install agile-offline`, or `uv sync` in the agile workspace)")


class _BadInput(Exception):
    """Bad command-line input: print the message and exit 2."""


def register(sub: Any) -> None:
    """Add the `dataset` subcommand and its `record` and `info` actions."""
    parser = sub.add_parser(
        "dataset",
        help="record or inspect offline RL datasets (HDF5 or local Minari)",
        description="Record transitions of a random or trained policy into an HDF5 file or a local "
                    "Minari dataset, or summarise an existing dataset. Needs agile-offline.",
    )
    actions = parser.add_subparsers(dest="dataset_command", metavar="ACTION")
    parser.set_defaults(handler=lambda args: _usage(parser))

    rec = actions.add_parser(
        "record",
        help="roll out a policy and save its transitions",
        description="Roll out a policy (uniform random by default, or a saved agent acting greedily, "
                    "mixed with random actions at rate --epsilon) for whole episodes and write the "
                    "transitions atomically to --out (HDF5) or to the local Minari dataset --minari-id. "
                    "Exit 2 for bad input; nothing is written when recording fails or is interrupted.",
    )
    rec.add_argument("--env", required=True, metavar="ID", help="Gymnasium environment id, e.g. CartPole-v1")
    rec.add_argument("--env-config", default=None, metavar="JSON",
                     help="keyword arguments of gymnasium.make as a JSON object, e.g. '{\"max_episode_steps\": 200}'")
    policy = rec.add_mutually_exclusive_group()
    policy.add_argument("--agent", metavar="CHECKPOINT", help="agent checkpoint directory (e.g. RUN_DIR/elite)")
    policy.add_argument("--random", action="store_true", help="uniform random actions (the default)")
    rec.add_argument("--epsilon", type=float, default=0.0, metavar="E",
                     help="probability of a uniform random action instead of the agent's, per step (default 0)")
    amount = rec.add_mutually_exclusive_group(required=True)
    amount.add_argument("--episodes", type=int, metavar="N", help="record exactly N whole episodes")
    amount.add_argument("--steps", type=int, metavar="N",
                        help="record at least N transitions (rounded up to finish the last episode)")
    rec.add_argument("--seed", type=int, default=0, help="seed of the env, the action sampling and epsilon (default 0)")
    out = rec.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", metavar="PATH", help="HDF5 file to write (e.g. data.h5)")
    out.add_argument("--minari-id", metavar="ID",
                     help="id of a new local Minari dataset, e.g. cartpole/random-v0 (under MINARI_DATASETS_PATH, "
                          "default ~/.minari/datasets)")
    rec.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    rec.set_defaults(handler=run_record)

    info = actions.add_parser("info", help="summarise a dataset",
                              description="Print the size, shapes, episode returns and metadata of an HDF5 "
                                          "dataset file or a local Minari dataset.")
    info.add_argument("source", metavar="PATH_OR_MINARI_ID", help="HDF5 file, or the id of a local Minari dataset")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.set_defaults(handler=run_info)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _offline_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("agile_offline") is not None


def _env_config(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadInput(f"--env-config is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise _BadInput("--env-config must be a JSON object")
    return config


def _check_record_args(args: argparse.Namespace) -> None:
    if args.episodes is not None and args.episodes < 1:
        raise _BadInput(f"--episodes must be >= 1, got {args.episodes}")
    if args.steps is not None and args.steps < 1:
        raise _BadInput(f"--steps must be >= 1, got {args.steps}")
    if not 0.0 <= args.epsilon <= 1.0:
        raise _BadInput(f"--epsilon must be in [0, 1], got {args.epsilon}")
    if args.epsilon > 0.0 and args.agent is None:
        raise _BadInput("--epsilon mixes random actions into an agent's; it needs --agent")


def _make_env(env_id: str, config: dict[str, Any]) -> Any:
    import gymnasium as gym

    from agile_core.environments.extras import missing_extra_message, register_env_namespace

    try:
        register_env_namespace(env_id)  # `ALE/...`: import ale-py
        return gym.make(env_id, **config)
    except (gym.error.Error, ImportError) as exc:
        raise _BadInput(missing_extra_message(f"--env {env_id}", exc) or f"cannot make --env {env_id}: {exc}") from exc
    except TypeError as exc:
        raise _BadInput(f"cannot make --env {env_id} with --env-config {json.dumps(config)}: {exc}") from exc


def _load_agent(checkpoint: str) -> Any:
    from agile_core.algorithms.base import EvolvableAlgorithm
    from agile_core.checkpoint import CheckpointError

    try:
        return EvolvableAlgorithm.load(checkpoint)
    except (CheckpointError, OSError) as exc:
        raise _BadInput(f"cannot load --agent {checkpoint}: {exc}") from exc


def _check_target(args: argparse.Namespace) -> None:
    from agile_offline.datasets import DatasetError, check_minari_id, check_output_path, minari_root

    try:
        if args.out is not None:
            check_output_path(args.out, overwrite=args.overwrite)
        else:
            check_minari_id(args.minari_id)
            existing = minari_root() / args.minari_id
            if existing.exists():
                raise _BadInput(f"Minari dataset {args.minari_id} already exists at {existing}; choose another id "
                                f"or version (--overwrite applies to --out files only)")
    except DatasetError as exc:
        raise _BadInput(str(exc)) from exc


def _returns_text(stats: dict[str, Any]) -> str:
    if "mean_return" not in stats:
        return "no complete episode"
    return (f"episode return mean {stats['mean_return']:.2f}, min {stats['min_return']:.2f}, "
            f"max {stats['max_return']:.2f}")


def _record(args: argparse.Namespace) -> int:
    from agile_offline.datasets import DatasetError, write_hdf5, write_minari
    from agile_offline.recorder import record

    _check_record_args(args)
    config = _env_config(args.env_config)
    _check_target(args)
    env = _make_env(args.env, config)
    try:
        agent = _load_agent(args.agent) if args.agent is not None else None
        policy_name = f"{type(agent).__name__} agent from {args.agent}" if agent is not None else "uniform random"
        try:
            data = record(env, agent, episodes=args.episodes, steps=args.steps, epsilon=args.epsilon,
                          seed=args.seed, progress=True)
        except ValueError as exc:
            raise _BadInput(f"cannot record in {args.env}: {exc}") from exc
        metadata = {"env_id": args.env, "env_config": config, "policy": "random" if agent is None else "agent",
                    "agent_checkpoint": args.agent, "algorithm": type(agent).__name__ if agent is not None else None,
                    "epsilon": args.epsilon, "seed": args.seed, "episodes": args.episodes, "steps": args.steps}
        try:
            if args.out is not None:
                where = str(write_hdf5(data, args.out, metadata=metadata, overwrite=args.overwrite))
            else:
                description = f"{policy_name} rollouts in {args.env} (epsilon {args.epsilon}, seed {args.seed})"
                write_minari(data, args.minari_id, args.env, observation_space=env.observation_space,
                             action_space=env.action_space, env_config=config,
                             algorithm_name=metadata["algorithm"] or "random", description=description)
                where = f"Minari dataset {args.minari_id}"
        except DatasetError as exc:
            raise _BadInput(str(exc)) from exc
    finally:
        env.close()
    stats = data.summary()
    print(f"recorded {stats['transitions']:,} transitions in {stats['episodes']:,} episodes of {args.env} "
          f"({policy_name}, epsilon {args.epsilon}): {_returns_text(stats)}")
    print(f"wrote {where}")
    return 0


def run_record(args: argparse.Namespace) -> int:
    """`agile dataset record`: exit 0 when written, 2 for bad input, 1 when the env or agent fails,
    130 when interrupted (nothing is written in those cases)."""
    if not _offline_available():
        print(_INSTALL, file=sys.stderr)
        return 2
    try:
        return _record(args)
    except _BadInput as exc:
        print(f"agile dataset record: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agile dataset record: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:  # a failing env or agent: one line, not a traceback
        print(f"agile dataset record: failed: {type(exc).__name__}: {exc}; nothing was written", file=sys.stderr)
        return 1


def _describe_leaves(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key} {tuple(item.shape[1:])} {item.dtype}" for key, item in value.items())
    return f"{tuple(value.shape[1:])} {value.dtype}"


def run_info(args: argparse.Namespace) -> int:
    """`agile dataset info`: exit 0 with a summary, 2 when the dataset cannot be read."""
    if not _offline_available():
        print(_INSTALL, file=sys.stderr)
        return 2
    from agile_offline.datasets import (
        DatasetError,
        load_dataset,
        load_minari,
        minari_metadata,
        read_metadata,
    )

    source = args.source
    try:
        if Path(source).exists():
            data = load_dataset(source)
            metadata = read_metadata(source) if Path(source).is_file() else {}
        else:
            data = load_minari(source)
            metadata = minari_metadata(source)
    except DatasetError as exc:
        if not Path(source).exists() and "is malformed" in str(exc):
            print(f"agile dataset info: {source}: no such file, and not a Minari id ({exc})", file=sys.stderr)
        else:
            print(f"agile dataset info: {exc}", file=sys.stderr)
        return 2
    stats = data.summary()
    summary = {"source": source, **stats, "observations": _describe_leaves(data.observations),
               "actions": _describe_leaves(data.actions), "metadata": metadata}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{source}: {stats['transitions']:,} transitions, {stats['episodes']:,} complete episodes "
          f"({stats['terminations']:,} terminated, {stats['truncations']:,} truncated)")
    print(f"observations: {summary['observations']}; actions: {summary['actions']}")
    print(_returns_text(stats))
    if metadata:
        print(f"metadata: {json.dumps(metadata)}")
    return 0
