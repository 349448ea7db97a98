"""PettingZoo Parallel environments for the multi-agent paradigm: building them from a spec,
checking them, stepping copies together (in process or in subprocesses), tracking episodes."""

from agile_marl.envs.async_vector import AsyncPettingZooVecEnv
from agile_marl.envs.batch import SubEnvError
from agile_marl.envs.checks import ParallelEnvError, check_parallel_env
from agile_marl.envs.episodes import FinishedEpisode, MultiAgentEpisodeTracker
from agile_marl.envs.factory import (
    MultiAgentEnvBuildError,
    build_parallel_env,
    make_env_factory,
    make_vec_env,
)
from agile_marl.envs.vector import MultiAgentVecEnv, PettingZooVecEnv, as_vec_env

__all__ = [
    "AsyncPettingZooVecEnv",
    "FinishedEpisode",
    "MultiAgentEnvBuildError",
    "MultiAgentEpisodeTracker",
    "MultiAgentVecEnv",
    "ParallelEnvError",
    "PettingZooVecEnv",
    "SubEnvError",
    "as_vec_env",
    "build_parallel_env",
    "check_parallel_env",
    "make_env_factory",
    "make_vec_env",
]
