"""`ArenaTrainer`: the same manifest as `LocalTrainer`, trained on an Arena server instead."""

from __future__ import annotations

import warnings
from typing import Any

from agile_arena.client import ArenaClient, one_node_warning
from agile_arena.manifests import MF_PBT_REFUSED, prepare_manifest
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
            reward_file: a reward module for reasoning jobs (not supported by this server).
            completion: a model completion to check the reward module with (not supported).
        """
        if num_nodes is not None and (isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1):
            raise TrainerConfigError(f"num_nodes must be an integer >= 1, got {num_nodes!r}")
        if num_nodes is not None and num_nodes > 1:
            warnings.warn(one_node_warning(f"num_nodes={num_nodes}"), RunWarning, stacklevel=2)
        if reward_file is not None or completion is not None:
            raise TrainerConfigError("reward_file/completion: uploading a reward module is not supported by the "
                                     "agile Arena server; name the reward in the manifest's environment section")
        if isinstance(self.manifest.selection_strategy, MultiFrequencySelectionSpec):  # manifest replaced since
            raise TrainerConfigError(f"selection_strategy: {MF_PBT_REFUSED}")
        return self.client.submit(prepare_manifest(self.manifest), resource_id=resource_id,
                                  experiment_name=experiment_name, project=project)
