"""Building Gymnasium environments from a manifest's `environment` section, and checking them."""

from agile_core.environments.api_check import EnvironmentAPIError, check_env
from agile_core.environments.gymnasium_factory import (
    EnvFactory,
    EnvironmentBuildError,
    make_vector_env,
)

__all__ = ["EnvFactory", "EnvironmentAPIError", "EnvironmentBuildError", "check_env", "make_vector_env"]
