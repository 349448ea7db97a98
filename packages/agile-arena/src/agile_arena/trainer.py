"""`ArenaTrainer`: the same manifest as `LocalTrainer`, trained on an Arena server instead."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

from agile_arena.client import ArenaClient, one_node_warning
from agile_arena.manifests import MF_PBT_REFUSED, prepare_manifest
from agile_arena.reward_check import RewardCheckError, check_reward
from agile_core.errors import RunWarning
from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.mutation import MutationSpec
from agile_core.specs.selection import MultiFrequencySelectionSpec
from agile_core.specs.training import ReplayBufferSpec, TrainingSpec
from agile_core.trainer import Trainer, TrainerConfigError


class ArenaTrainer(Trainer):
    """Submits a validated manifest to an Arena server; `train()` returns the new Experiment.

    Args:
        algorithm: an algorithm spec or name (its paradigm must be installed here, since the
            manifest is validated before it is sent).
        environment: an environment spec or name (an environment object cannot be sent).
        training: training loop parameters.
        client: an ArenaClient; one is made from `api_key` (or the environment and the
            credentials file) when omitted.
        api_key: the key for the client made here.
        url: the server for the client made here (default: $AGILE_ARENA_URL, the credentials file
            `agile arena login` writes, http://127.0.0.1:8470), whether or not `api_key` is given.
        mutation: mutation probabilities and hyperparameter ranges.
        selection_strategy: tournament selection (Arena runs tournament selection only; MF-PBT
            is refused).
        replay_buffer: replay buffer of off-policy algorithms.
        kwargs: the deprecated `tournament` alias of `selection_strategy`.
    """

    def __init__(self, algorithm: AlgorithmSpec | str, environment: Any, training: TrainingSpec | None = None,
                 client: ArenaClient | None = None, api_key: str | None = None, mutation: MutationSpec | None = None,
                 selection_strategy: Any = None, replay_buffer: ReplayBufferSpec | None = None,
                 url: str | None = None, **kwargs: Any) -> None:
        super().__init__(algorithm, environment, training, mutation, selection_strategy, replay_buffer, **kwargs)
        if self.env_object is not None:
            raise TrainerConfigError("environment: ArenaTrainer sends the manifest, not objects; give an "
                                     "environment spec or name instead of an environment instance")
        if isinstance(self.manifest.selection_strategy, MultiFrequencySelectionSpec):
            raise TrainerConfigError(f"selection_strategy: {MF_PBT_REFUSED}")
        if client is not None and (api_key is not None or url is not None):
            raise TrainerConfigError("give `client`, or `api_key` and `url`, not both")
        self.client = client if client is not None else ArenaClient(api_key=api_key, url=url)

    def train(self, resource_id: str | int | None = None, num_nodes: int | None = None, project: str | None = None,
              experiment_name: str | None = None, reward_file: Any = None,
              completion: str | None = None) -> dict[str, Any]:
        """Submit the manifest; return the server's Experiment (`id`, `status`, ...).

        Args:
            resource_id: where to run (see `ArenaClient.resources()`; the server's default when None).
            num_nodes: nodes to train on; the agile Arena server trains each experiment on one node,
                so more than 1 draws a warning and the job runs on one node.
            project: a project name to group experiments.
            experiment_name: a name for the experiment.
            reward_file: the reward module of a reasoning job (a `.py` path or its bytes): it
                replaces the manifest's `environment.reward_file_path` and is uploaded with the
                job, like every file the manifest names.
            completion: a model completion to try the reward function on here before anything is
                sent (with the dataset's first prompt and answer); a function that fails or
                returns no finite number refuses the submission. The result is returned under
                `reward_check` (`completion`, `prompt`, `answer`, `reward`).
        """
        if num_nodes is not None and (isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1):
            raise TrainerConfigError(f"num_nodes must be an integer >= 1, got {num_nodes!r}")
        if num_nodes is not None and num_nodes > 1:
            warnings.warn(one_node_warning(f"num_nodes={num_nodes}"), RunWarning, stacklevel=2)
        if isinstance(self.manifest.selection_strategy, MultiFrequencySelectionSpec):  # manifest replaced since
            raise TrainerConfigError(f"selection_strategy: {MF_PBT_REFUSED}")
        with tempfile.TemporaryDirectory(prefix="agile-arena-reward-") as scratch:
            data = json.loads(self.manifest.to_json())
            if reward_file is not None:
                data["environment"]["reward_file_path"] = str(self._reward_module(reward_file, Path(scratch)))
            checked = None
            if completion is not None:
                try:
                    checked = check_reward(data["environment"], self.manifest.base_dir, completion)
                except RewardCheckError as exc:
                    raise TrainerConfigError(str(exc)) from None
            prepared = prepare_manifest(data) if reward_file is not None else prepare_manifest(self.manifest)
            experiment = self.client.submit(prepared, resource_id=resource_id, experiment_name=experiment_name,
                                            project=project)
        if checked is not None:
            experiment["reward_check"] = checked
        return experiment

    def _reward_module(self, reward_file: str | Path | bytes, scratch: Path) -> Path:
        """The local `.py` file to upload as the environment's reward module (bytes are written to
        `scratch/reward.py` first)."""
        if "reward_file_path" not in type(self.manifest.environment).model_fields:
            raise TrainerConfigError(f"reward_file: the {self.manifest.algorithm.name} environment takes no reward "
                                     "module (it is for GRPO, LLMPPO and LLMREINFORCE on a dataset)")
        if isinstance(reward_file, bytes):
            path = scratch / "reward.py"
            path.write_bytes(reward_file)
            return path
        if not isinstance(reward_file, str | Path):
            raise TrainerConfigError(f"reward_file must be a path or the module's bytes, got {type(reward_file).__name__}")
        path = Path(reward_file).expanduser()
        if path.suffix != ".py" or not path.is_file():
            raise TrainerConfigError(f"reward_file: {path} is not a Python file (.py) here")
        return path.resolve()
