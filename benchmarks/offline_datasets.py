"""Dataset benchmark: record, write and load speed of offline RL datasets, and peak memory.

Records uniform-random CartPole transitions with :func:`agile_offline.recorder.record`, writes
them to an HDF5 file and to a local Minari dataset (in a temporary folder), loads both back and
prints one JSON line:

    OMP_NUM_THREADS=1 uv run python benchmarks/offline_datasets.py --transitions 20000

Rates are transitions per second of each stage alone (recording includes stepping the env);
``peak_rss_mb`` is the process's peak resident memory at the end (Linux ``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def measure_datasets(transitions: int = 20_000, *, env_id: str = "CartPole-v1", seed: int = 0,
                     workdir: Path | None = None) -> dict[str, Any]:
    """Transitions/s of recording, HDF5 write/load and Minari write/load, and peak RSS (MB)."""
    import gymnasium as gym

    from agile_offline.datasets import load_dataset, load_minari, write_hdf5, write_minari
    from agile_offline.recorder import record

    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        previous = os.environ.get("MINARI_DATASETS_PATH")
        os.environ["MINARI_DATASETS_PATH"] = str(Path(folder) / "minari")
        try:
            data, t_record = _timed(lambda: record(env_id, None, steps=transitions, seed=seed, progress=False))
            path, t_write_h5 = _timed(lambda: write_hdf5(data, Path(folder) / "data.h5"))
            _, t_load_h5 = _timed(lambda: load_dataset(path))
            env = gym.make(env_id)
            _, t_write_minari = _timed(lambda: write_minari(data, "bench/random-v0", env_id,
                                                            observation_space=env.observation_space,
                                                            action_space=env.action_space))
            _, t_load_minari = _timed(lambda: load_minari("bench/random-v0"))
            env.close()
            size_h5 = path.stat().st_size
        finally:
            if previous is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = previous
    n = len(data)
    return {
        "env": env_id, "transitions": n, "episodes": len(data.episode_returns()),
        "record_per_s": round(n / t_record), "hdf5_write_per_s": round(n / t_write_h5),
        "hdf5_load_per_s": round(n / t_load_h5), "minari_write_per_s": round(n / t_write_minari),
        "minari_load_per_s": round(n / t_load_minari), "hdf5_bytes": size_h5,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transitions", type=int, default=20_000)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(measure_datasets(args.transitions, env_id=args.env, seed=args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
