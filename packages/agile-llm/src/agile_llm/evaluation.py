"""Evaluate saved LLM agents on the test split of the data they were trained on.

:func:`evaluate_checkpoint` loads an agent checkpoint (e.g. ``RUN_DIR/elite``) or every member
of a run checkpoint (``RUN_DIR/checkpoints/checkpoint_<n>``, a checkpoint folder or a run
directory: its latest checkpoint), takes the data from the training manifest (given, or the run
directory's ``manifest.resolved.json``) and measures each agent the way the training loops do:

* rollout algorithms (GRPO, LLMPPO, LLMREINFORCE): greedy episodes on the held-out prompts; ``mean_reward`` (the loop's
  fitness), ``std_reward`` and, with ``environment.max_reward``, ``accuracy`` (share of episodes
  reaching it);
* SFT: ``loss`` (mean per-token response cross-entropy over the test split; fitness is minus it)
  and ``accuracy`` (share of held-out prompts whose greedy completion equals the target);
* DPO: ``loss`` (mean ``-log sigmoid(margin)`` over held-out pairs, without the NLL term),
  ``accuracy`` (preference accuracy: the loop's fitness) and ``margin`` (mean implicit margin).

Problems the user can fix (a base model that is missing or not the one the agent was trained on,
a manifest of another paradigm, a dataset without a usable test split) raise
:class:`EvaluationError` with a one-line message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["EvaluationError", "evaluate_agent", "evaluate_checkpoint", "find_run_manifest"]

ROLLOUT, DATASET = "llm_rollout", "llm_dataset"
RUN_MANIFEST = "manifest.resolved.json"
"""The manifest `agile train` writes into every run directory."""
REDACTED = "***"
"""What ``manifest.resolved.json`` writes for values under secret-like keys."""


class EvaluationError(ValueError):
    """A checkpoint, manifest or dataset that cannot be evaluated (the message says why)."""


@runtime_checkable
class EvaluatesEpisodes(Protocol):
    """A rollout agent whose greedy evaluation gives its episodes (every ``RolloutLearner``), not
    only their mean reward (``evaluate_reward``)."""

    def evaluate_episodes(self, env_factory: Any, episodes: int | None = None) -> list[Any]:
        """`episodes` greedy episodes on the held-out split."""
        ...


# ---------------------------------------------------------------------- entry point
def evaluate_checkpoint(path: str | Path, manifest: str | Path | Mapping[str, Any] | Any = None, *,
                        episodes: int | None = None, device: str = "cpu",
                        member: int | None = None) -> dict[str, Any]:
    """Evaluate the LLM agent(s) saved at `path` on the test split of `manifest`'s data.

    Args:
        path: An agent checkpoint (``RUN_DIR/elite``), a run checkpoint, a checkpoint folder or
            a run directory (then its latest run checkpoint).
        manifest: The training manifest (YAML/JSON path, dict or ``TrainingManifest``): its
            ``environment`` section gives the dataset, reward or environment. None: the
            ``manifest.resolved.json`` of the run directory the checkpoint sits in.
        episodes: Rollout algorithms: evaluation episodes (default: the manifest's
            ``environment.eval_episodes``, else every held-out prompt, i.e. the environment's
            ``num_test``, else 1).
            Dataset algorithms always use the whole test split.
        device: Torch device of the agents.
        member: Of a run checkpoint, evaluate only the member in this population slot.

    Returns:
        For one agent, its result (see :func:`evaluate_agent`) plus ``checkpoint`` and
        ``manifest``; for a run checkpoint, ``{"checkpoint", "manifest", "algorithm",
        "paradigm", "members": [result per member], "best_member": slot}``.
    """
    if episodes is not None and int(episodes) < 1:
        raise EvaluationError(f"episodes must be at least 1, got {episodes}")
    from agile_core.checkpoint import CheckpointError

    try:
        target, kind, metas = _read_metadata(path)
    except CheckpointError as error:
        raise EvaluationError(str(error)) from None
    slots = list(range(len(metas)))
    if member is not None:
        if kind != "population":
            raise EvaluationError(f"{path} holds one agent; member applies to run checkpoints")
        if not 0 <= member < len(metas):
            raise EvaluationError(f"member {member} is not in the run checkpoint (slots 0..{len(metas) - 1})")
        slots = [member]
    spec, source = _load_manifest(manifest, target)
    if episodes is not None and spec.paradigm_name == DATASET:
        raise EvaluationError(f"episodes applies to rollout algorithms; {spec.algorithm.name} manifests are "
                              "evaluated on the whole test split")
    agents = _load_agents(target, kind, [(slot, metas[slot]) for slot in slots], spec, device)
    data = _Data(spec, from_run=manifest is None)
    results = []
    for slot, agent in zip(slots, agents, strict=True):
        result = evaluate_agent(agent, spec, episodes=episodes, data=data)
        if kind == "population":
            result["slot"] = slot
        results.append(result)
    header = {"checkpoint": str(path), "manifest": source}
    if kind == "agent" or member is not None:
        return {**header, **results[0]}
    best = max(results, key=lambda r: r["fitness"])
    return {**header, "algorithm": results[0]["algorithm"], "paradigm": results[0]["paradigm"],
            "members": results, "best_member": best["slot"]}


def evaluate_agent(agent: Any, manifest: Any, *, episodes: int | None = None, data: Any = None) -> dict[str, Any]:
    """One LLM agent (already loaded) on the test split of `manifest`'s data: ``algorithm``,
    ``paradigm``, ``agent_id`` (the agent's index), ``steps``, ``base_model``, ``fitness`` (what the
    training loop's evaluation gives) and the metrics of its kind (see the module docstring)."""
    from agile_llm.algorithm import LoRAFinetuner

    if not isinstance(agent, LoRAFinetuner):
        raise EvaluationError(f"{type(agent).__name__} is not an agile_llm agent")
    spec = manifest if data is not None else _validated(manifest, "<manifest>")[0]
    data = data if data is not None else _Data(spec)
    paradigm = _paradigm(agent)
    _check_paradigm(paradigm, spec, type(agent).__name__)
    result: dict[str, Any] = {"algorithm": type(agent).__name__, "paradigm": paradigm, "agent_id": int(agent.index),
                              "steps": int(agent.steps), "base_model": agent.base.reference, "split": "test"}
    if paradigm == ROLLOUT:
        count = episodes if episodes is not None else spec.environment.eval_episodes
        result.update(_rollout_metrics(agent, data.rollout_factory(agent), count, spec.environment.max_reward))
    else:
        if episodes is not None:
            raise EvaluationError(f"episodes applies to rollout algorithms; {type(agent).__name__} is evaluated on "
                                  "the whole test split")
        env = data.dataset(agent)
        if _is(agent, "SFT"):
            result.update(_sft_metrics(agent, env))
        elif _is(agent, "DPO"):
            result.update(_dpo_metrics(agent, env))
        else:  # another dataset algorithm: its own fitness on the test split
            result.update(metric="fitness", fitness=float(agent.test(env)))
    return result


# ---------------------------------------------------------------------- checkpoints
def _read_metadata(path: str | Path) -> tuple[Path, str, list[dict[str, Any]]]:
    """(checkpoint directory, "agent" or "population", each agent's metadata)."""
    from agile_core.checkpoint import CheckpointError, inspect_checkpoint
    from agile_core.training.checkpointing import resolve_run_checkpoint

    target = Path(path)
    if not target.exists():
        raise CheckpointError(str(path), "does not exist")
    target = resolve_run_checkpoint(target)
    metadata = inspect_checkpoint(target).metadata
    kind = metadata.get("kind")
    if kind == "agent":
        return target, "agent", [metadata]
    if kind == "population":
        return target, "population", list(metadata.get("agents", []))
    raise CheckpointError(str(path), f"not an agent or run checkpoint (kind={kind!r})")


def _load_agents(target: Path, kind: str, metas: Sequence[tuple[int, Mapping[str, Any]]], manifest: Any,
                 device: str) -> list[Any]:
    """Rebuild each saved agent on its base model (loaded once, content hash checked)."""
    from agile_core.algorithms.base import EvolvableAlgorithm
    from agile_core.algorithms.persistence import algorithm_class, decode_argument, restore_agent
    from agile_core.checkpoint import CheckpointError, read_checkpoint
    from agile_llm.algorithm import LoRAFinetuner

    bases: dict[tuple[Any, ...], Any] = {}
    agents = []
    with read_checkpoint(target, map_location=device) as checkpoint:
        for slot, meta in metas:
            try:
                klass = algorithm_class(str(meta.get("algorithm")), EvolvableAlgorithm)
            except CheckpointError as error:
                raise EvaluationError(str(error)) from None
            if not issubclass(klass, LoRAFinetuner):
                raise EvaluationError(f"{target} holds a {klass.__name__} agent, not an LLM agent: evaluate it "
                                      "with --env")
            extra = meta.get("extra") or {}
            args = decode_argument(meta["init_args"], device)
            key = (extra.get("base_model"), extra.get("base_model_hash"), json.dumps(args.get("lora_config"),
                                                                                     sort_keys=True))
            if key not in bases:
                bases[key] = _load_base(extra, args.get("lora_config"), manifest, device)
            args.update(model=bases[key], tokenizer=None, device=device)
            if "use_vllm" in args:  # evaluation generates greedily with Hugging Face, GPU or not
                args["use_vllm"] = False
            agent = klass(**args)
            tensors = checkpoint.part("agent" if kind == "agent" else f"agent_{slot}")
            try:
                restore_agent(agent, meta, tensors)
            except CheckpointError as error:
                raise EvaluationError(str(error)) from None
            agents.append(agent)
    return agents


def _load_base(saved: Mapping[str, Any], lora_config: Any, manifest: Any, device: str) -> Any:
    """The shared base the agent was trained on: the checkpoint's reference, else the manifest's
    ``network.pretrained_model_name_or_path``; the first one that loads and has the saved
    content hash."""
    from agile_llm.models import BaseModelError, SharedBase

    reference, expected = saved.get("base_model"), saved.get("base_model_hash")
    network = manifest.network
    candidates = [str(reference)] if reference else []
    manifest_path = getattr(network, "pretrained_model_name_or_path", None)
    if manifest_path is not None:
        resolved = Path(manifest.base_dir) / manifest_path
        candidate = str(resolved.resolve()) if resolved.exists() else str(manifest_path)
        if candidate not in candidates:
            candidates.append(candidate)
    dtype = getattr(network, "dtype", "float32")
    problems = []
    for candidate in candidates:
        try:
            base = SharedBase.get(candidate, lora_config, dtype=dtype, device=device)
        except BaseModelError as error:
            problems.append(str(error))
            continue
        if expected is None or base.model_hash == expected:
            return base
        problems.append(f"the base model at {candidate} has content hash {base.model_hash[:12]}..., but the "
                        f"checkpoint was trained on {reference} with hash {str(expected)[:12]}...")
    if not candidates:
        raise EvaluationError("the checkpoint names no base model and the manifest has no "
                              "network.pretrained_model_name_or_path")
    raise EvaluationError("cannot load the base model the checkpoint was trained on: " + "; ".join(problems))


def _paradigm(agent: Any) -> str:
    from agile_core.registry import UnknownAlgorithmError, paradigm_of

    try:
        return paradigm_of(type(agent).__name__).name
    except UnknownAlgorithmError:
        return DATASET if _is(agent, "SFT") or _is(agent, "DPO") else ROLLOUT


def _is(agent: Any, name: str) -> bool:
    return any(klass.__name__ == name for klass in type(agent).__mro__)


# ---------------------------------------------------------------------- manifests
def find_run_manifest(checkpoint: str | Path) -> Path | None:
    """The ``manifest.resolved.json`` of the run directory `checkpoint` sits in (``RUN_DIR/elite``,
    ``RUN_DIR/checkpoints/checkpoint_<n>`` or the run directory itself), if any."""
    here = Path(checkpoint).resolve()
    for folder in (here, *list(here.parents)[:2]):
        candidate = folder / RUN_MANIFEST
        if candidate.is_file():
            return candidate
    return None


def _load_manifest(manifest: Any, checkpoint: Path) -> tuple[Any, str | None]:
    """(validated manifest, where it came from)."""
    if manifest is None:
        found = find_run_manifest(checkpoint)
        if found is None:
            raise EvaluationError(f"no manifest: {checkpoint} is not inside a run directory with {RUN_MANIFEST}; "
                                  "give the training manifest (agile evaluate ... --manifest MANIFEST)")
        return _validated(found, str(found), run_manifest=True)
    return _validated(manifest, str(manifest) if isinstance(manifest, str | Path) else None)


def _validated(manifest: Any, source: str | None, run_manifest: bool = False) -> tuple[Any, str | None]:
    """The validated manifest; a run's ``manifest.resolved.json`` loses the algorithm values it
    redacted as "***" (they take their defaults: the agents' own come from the checkpoint)."""
    from agile_core.errors import ManifestError
    from agile_core.specs.manifest import TrainingManifest, validate_source
    from agile_core.yaml_source import read_manifest_file

    if isinstance(manifest, str | Path) and not Path(manifest).is_file():
        raise EvaluationError(f"manifest {manifest} does not exist")
    try:
        if isinstance(manifest, str | Path):
            parsed = read_manifest_file(manifest)
            if run_manifest and isinstance(parsed.data, dict) and isinstance(parsed.data.get("algorithm"), dict):
                parsed.data["algorithm"] = {k: v for k, v in parsed.data["algorithm"].items() if v != REDACTED}
            spec = validate_source(parsed, emit_warnings=False)  # only its environment section is used
        else:
            spec = TrainingManifest.get_validated(manifest)
    except ManifestError as error:
        raise EvaluationError(f"invalid manifest:\n{error.report()}") from None
    if spec.paradigm_name not in (ROLLOUT, DATASET):
        raise EvaluationError(f"the manifest trains {spec.algorithm.name} ({spec.paradigm_name}), not an LLM "
                              "algorithm: give the LLM manifest the checkpoint was trained with")
    return spec, source


def _check_paradigm(paradigm: str, manifest: Any, algorithm: str) -> None:
    if manifest.paradigm_name != paradigm:
        raise EvaluationError(f"the checkpoint holds a {algorithm} agent ({paradigm}), but the manifest trains "
                              f"{manifest.algorithm.name} ({manifest.paradigm_name}): their data do not fit")


# ---------------------------------------------------------------------- data
class _Data:
    """The manifest's environment section, built once and bound per tokenizer and length."""

    def __init__(self, manifest: Any, from_run: bool = False) -> None:
        self.manifest = manifest
        self.hint = (f" ({RUN_MANIFEST} keeps the original manifest's relative paths: give that manifest with "
                     "--manifest)") if from_run else ""
        self._sources: dict[tuple[int, int], Any] = {}
        self._datasets: dict[tuple[int, str, int], Any] = {}

    def error(self, message: str) -> EvaluationError:
        """`message` as an EvaluationError, with the run-manifest hint when a file is missing."""
        missing = "not found" in message or "does not exist" in message
        return EvaluationError(message + (self.hint if missing else ""))

    def rollout_factory(self, agent: Any) -> Any:
        """A harness factory for `agent` (its tokenizer and transcript limit ``max_length``)."""
        from agile_core.errors import ManifestError
        from agile_llm.run import RolloutSource

        key = (id(agent.tokenizer), int(agent.max_length))
        if key not in self._sources:
            try:
                source = RolloutSource(self.manifest.environment, self.manifest.base_dir)
            except ManifestError as error:
                raise self.error(_issues(error)) from None
            source.tokenizer, source.max_length = agent.tokenizer, agent.max_length
            num_test = getattr(_probe_env(source), "num_test", None)
            if num_test is not None and int(num_test) < 1:
                raise EvaluationError("the environment has no held-out (test) prompts to evaluate on")
            self._sources[key] = source
        return self._sources[key].factory

    def dataset(self, agent: Any) -> Any:
        """The manifest's dataset, tokenised for `agent` (its kind and ``max_length``)."""
        from agile_core.errors import ManifestError
        from agile_llm.data import DatasetError
        from agile_llm.run import make_env

        kind = "dpo" if _is(agent, "DPO") else "sft"
        key = (id(agent.tokenizer), kind, int(agent.max_length))
        if key not in self._datasets:
            try:
                env = make_env(self.manifest.environment, self.manifest.base_dir)
                env.bind(agent.tokenizer, kind, agent.max_length)
            except ManifestError as error:
                raise self.error(_issues(error)) from None
            except DatasetError as error:
                raise self.error(f"environment.dataset: {error}") from None
            if not env.test:
                raise EvaluationError("environment.dataset: the test split is empty")
            self._datasets[key] = env
        return self._datasets[key]


def _issues(error: Any) -> str:
    """A ManifestError raised while building the data, as ``path: message`` on one line."""
    from agile_core.errors import dotted

    return "; ".join(f"{dotted(issue.path)}: {issue.message}" for issue in error.issues)


def _probe_env(source: Any) -> Any:
    try:
        return source.make_text_env()
    except Exception as error:  # a user environment that cannot be built
        raise EvaluationError(f"cannot build the environment {source.spec.entrypoint or source.name}: "
                              f"{type(error).__name__}: {error}") from None


# ---------------------------------------------------------------------- metrics
def _rollout_metrics(agent: Any, factory: Any, episodes: int | None, max_reward: float | None) -> dict[str, Any]:
    """Greedy episodes on the held-out prompts, as the rollout loop's evaluation runs them."""
    import numpy as np

    if not isinstance(agent, EvaluatesEpisodes):  # only the mean is available
        mean = float(agent.evaluate_reward(factory, episodes))
        return {"metric": "mean_reward", "fitness": mean, "mean_reward": mean, "std_reward": None,
                "episodes": episodes, "max_reward": max_reward, "accuracy": None}
    finished = agent.evaluate_episodes(factory, episodes)
    rewards = [float(e.reward) for e in finished]
    accuracy = None if max_reward is None else float(np.mean([r >= max_reward for r in rewards]))
    mean = float(np.mean(rewards))
    return {"metric": "mean_reward", "fitness": mean, "mean_reward": mean, "std_reward": float(np.std(rewards)),
            "episodes": len(rewards), "max_reward": max_reward, "accuracy": accuracy}


def _sft_metrics(agent: Any, env: Any, batch_size: int = 32) -> dict[str, Any]:
    """Test-split loss (the loop's fitness is minus it) and greedy-match accuracy."""
    from agile_llm.algorithm import generate_greedy

    loss = float(agent.evaluate_loss(env))
    response_column = env.column_names["response"]
    longest = max(len(example[0][1]) for example in env.test)
    matches = 0
    for start in range(0, len(env.test), batch_size):
        prompts = [example[0][0] for example in env.test[start:start + batch_size]]
        completions = generate_greedy(agent, prompts, max_new_tokens=longest + 2)
        rows = env.test_rows[start:start + batch_size]
        matches += sum(c.strip() == str(row[response_column]).strip() for c, row in zip(completions, rows, strict=True))
    return {"metric": "loss", "fitness": -loss, "loss": loss, "accuracy": matches / len(env.test),
            "examples": len(env.test)}


def _dpo_metrics(agent: Any, env: Any, batch_size: int = 32) -> dict[str, Any]:
    """Held-out preference accuracy (the loop's fitness), mean margin and DPO loss."""
    import torch

    from agile_llm.algorithm import sequence_logprobs
    from agile_llm.dpo import dpo_loss

    accuracy, margin = agent.evaluate_preferences(env, batch_size)
    total, pairs = 0.0, 0
    with torch.no_grad():
        for batch in env.test_batches(batch_size):
            count = int(batch["pairs"])
            logp, _ = sequence_logprobs(agent.policy(training=False), batch, agent.device)
            with agent.reference_policy() as reference:
                ref, _ = sequence_logprobs(reference, batch, agent.device)
            loss, _ = dpo_loss(logp[:count], logp[count:], ref[:count], ref[count:], agent.beta)
            total += float(loss) * count
            pairs += count
    return {"metric": "accuracy", "fitness": float(accuracy), "loss": total / max(pairs, 1),
            "accuracy": float(accuracy), "margin": float(margin), "pairs": pairs}
