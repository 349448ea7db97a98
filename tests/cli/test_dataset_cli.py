"""`agile dataset record|info` in-process: outputs, exit codes, atomic writes, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agile_cli.main import main

NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


@pytest.fixture(autouse=True)
def minari_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def _record(*extra: str) -> list[str]:
    return ["dataset", "record", "--env", "CartPole-v1", *extra]


def test_help_lists_the_actions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "dataset" in capsys.readouterr().out
    assert main(["dataset", "record", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--minari-id" in text and "--epsilon" in text and "--overwrite" in text
    assert main(["dataset", "info", "--help"]) == 0
    assert main(["dataset"]) == 2


def test_agile_help_imports_no_heavy_module() -> None:
    code = ("import sys; from agile_cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'h5py', 'minari', 'gymnasium', 'agile_offline') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_record_random_to_hdf5_then_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agile_offline.datasets import load_dataset, read_metadata

    out = tmp_path / "data" / "cartpole.h5"
    assert main(_record("--episodes", "4", "--seed", "1", "--out", str(out))) == 0
    printed = capsys.readouterr().out
    data = load_dataset(out)
    returns = data.episode_returns()
    assert len(returns) == 4
    assert f"recorded {len(data)} transitions in 4 episodes of CartPole-v1 (uniform random" in printed
    assert f"mean {np.mean(returns):.2f}, min {min(returns):.2f}, max {max(returns):.2f}" in printed
    assert f"wrote {out}" in printed
    meta = read_metadata(out)
    assert meta["env_id"] == "CartPole-v1" and meta["policy"] == "random" and meta["seed"] == 1

    assert main(["dataset", "info", str(out)]) == 0
    info = capsys.readouterr().out
    assert f"{len(data)} transitions, 4 complete episodes" in info and "(4,) float32" in info
    assert main(["dataset", "info", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 4 and summary["metadata"]["env_id"] == "CartPole-v1"


def test_record_to_minari_then_info(minari_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agile_offline.datasets import load_minari

    argv = _record("--steps", "50", "--env-config", '{"max_episode_steps": 10}', "--minari-id", "cartpole/random-v0")
    assert main(argv) == 0
    assert "wrote Minari dataset cartpole/random-v0" in capsys.readouterr().out
    data = load_minari("cartpole/random-v0")
    assert len(data) >= 50 and data.truncations.any()
    assert main(["dataset", "info", "cartpole/random-v0"]) == 0
    assert '"env_id": "CartPole-v1"' in capsys.readouterr().out
    assert main(argv) == 2
    assert "already exists" in capsys.readouterr().err


def test_record_with_an_agent_and_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gymnasium as gym

    from agile_offline.datasets import load_dataset
    from agile_offpolicy.dqn import DQN

    env = gym.make("CartPole-v1")
    checkpoint = DQN(env.observation_space, env.action_space, net_config=NET, seed=0).save_checkpoint(tmp_path / "dqn")
    out = tmp_path / "agent.h5"
    assert main(_record("--agent", str(checkpoint), "--epsilon", "0.2", "--episodes", "2", "--out", str(out))) == 0
    assert "(DQN agent from" in capsys.readouterr().out
    assert len(load_dataset(out).episode_returns()) == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["--env", "NoSuchEnv-v0", "--episodes", "1"], "cannot make --env NoSuchEnv-v0"),
    (["--env", "CartPole-v1", "--episodes", "0"], "--episodes must be >= 1, got 0"),
    (["--env", "CartPole-v1", "--steps", "-5"], "--steps must be >= 1, got -5"),
    (["--env", "CartPole-v1", "--episodes", "1", "--agent", "x", "--epsilon", "1.5"], r"--epsilon must be in \[0, 1\]"),
    (["--env", "CartPole-v1", "--episodes", "1", "--epsilon", "0.3"], "it needs --agent"),
    (["--env", "CartPole-v1", "--episodes", "1", "--env-config", "{oops"], "--env-config is not valid JSON"),
    (["--env", "CartPole-v1", "--episodes", "1", "--env-config", "[1]"], "--env-config must be a JSON object"),
    (["--env", "CartPole-v1", "--episodes", "1", "--env-config", '{"bogus": 1}'], "cannot make --env CartPole-v1 with"),
    (["--env", "CartPole-v1", "--episodes", "1", "--agent", "{tmp}/missing"], "cannot load --agent"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data.h5"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["dataset", "record", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("agile dataset record: ")
    assert __import__("re").search(message, err), err
    assert not out.exists()


def test_bad_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert main(_record("--episodes", "1", "--out", str(blocker / "data.h5"))) == 2
    assert "cannot create the folder" in capsys.readouterr().err
    assert main(_record("--episodes", "1", "--out", str(tmp_path))) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(_record("--episodes", "1", "--minari-id", "no version")) == 2
    assert "is malformed" in capsys.readouterr().err
    existing = tmp_path / "old.h5"
    existing.write_bytes(b"old")
    assert main(_record("--episodes", "1", "--out", str(existing))) == 2
    assert "already exists (pass --overwrite" in capsys.readouterr().err
    assert existing.read_bytes() == b"old"
    assert main(_record("--episodes", "1", "--out", str(existing), "--overwrite")) == 0
    assert existing.read_bytes() != b"old"


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    out = str(tmp_path / "d.h5")
    assert main(_record("--out", out)) == 2  # neither --episodes nor --steps
    assert main(_record("--episodes", "1", "--steps", "3", "--out", out)) == 2
    assert main(_record("--episodes", "1", "--agent", "a", "--random", "--out", out)) == 2
    assert main(_record("--episodes", "1")) == 2  # no --out / --minari-id


@pytest.mark.parametrize(("error", "code"), [(KeyboardInterrupt, 130), (RuntimeError, 1)])
def test_an_interrupted_recording_writes_nothing(error: type[BaseException], code: int, tmp_path: Path,
                                                 minari_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import agile_offline.recorder as recorder

    def rollout(*args: object, **kwargs: object) -> None:
        raise error("stop")

    monkeypatch.setattr(recorder, "_rollout", rollout)
    assert main(_record("--episodes", "3", "--out", str(tmp_path / "data.h5"))) == code
    assert main(_record("--episodes", "3", "--minari-id", "ns/y-v0")) == code
    assert "nothing was written" in capsys.readouterr().err
    assert list(tmp_path.glob("*.h5*")) == [] and not (minari_path / "ns").exists()


def test_info_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "info", "absent/none-v0"]) == 2
    assert "not found in the local Minari data path" in capsys.readouterr().err
    assert main(["dataset", "info", str(tmp_path / "nope.h5")]) == 2
    assert "no such file, and not a Minari id" in capsys.readouterr().err
    (tmp_path / "text.h5").write_text("plain")
    assert main(["dataset", "info", str(tmp_path / "text.h5")]) == 2
    assert "cannot be read as an HDF5 file" in capsys.readouterr().err


def test_without_agile_offline_installed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "agile_offline" else real(name, *a))
    assert main(_record("--episodes", "1", "--out", str(tmp_path / "d.h5"))) == 2
    assert "needs the agile-offline package" in capsys.readouterr().err
    assert main(["dataset", "info", "x-v0"]) == 2


def _transitions(handle: object, n: int = 5, skip: tuple[str, ...] = ()) -> None:
    fields = {"observations": np.zeros((n, 3), "f4"), "actions": np.zeros(n, "i8"), "rewards": np.ones(n, "f4"),
              "next_observations": np.zeros((n, 3), "f4"), "terminations": np.eye(1, n, n - 1, dtype=bool)[0],
              "truncations": np.zeros(n, bool)}
    for name, value in fields.items():
        if name not in skip:
            handle[name] = value  # type: ignore[index]


def _huge(f: object) -> None:
    _transitions(f, skip=("observations",))
    f.create_dataset("observations", shape=(10**11, 3), dtype="f4", chunks=(1024, 3))  # type: ignore[attr-defined]


def _external(f: object) -> None:
    import h5py

    _transitions(f, skip=("rewards",))
    f["rewards"] = h5py.ExternalLink("/etc/other.h5", "/rewards")  # type: ignore[index]


def _self_link(f: object) -> None:
    import h5py

    _transitions(f, skip=("observations",))
    f["observations"] = h5py.SoftLink("/observations")  # type: ignore[index]


def _group_loop(f: object) -> None:
    import h5py

    _transitions(f, skip=("observations",))
    group = f.create_group("observations")  # type: ignore[attr-defined]
    group["a"] = np.zeros((5, 2), "f4")
    group["loop"] = h5py.SoftLink("/observations")


def _metadata(value: object):
    def build(f: object) -> None:
        _transitions(f)
        f.attrs["agile_metadata"] = value  # type: ignore[attr-defined]
    return build


@pytest.mark.parametrize(("build", "message"), [
    (_huge, "`observations` has shape (100000000000, 3): a dataset field `observations` of 100,000,000,000 rows "
            "needs 1.1 TB"),
    (_external, "`rewards` is an external link to /etc/other.h5:/rewards; agile reads only data stored in the "
                "dataset file itself"),
    (_self_link, "`observations` cannot be read (a broken or looping link?)"),
    (_group_loop, "`observations/loop/loop/loop/loop` nests groups more than 4 deep"),
    (_metadata("{not json"), "its `agile_metadata` attribute is not a JSON object (got '{not json')"),
    (_metadata("[1, 2]"), "its `agile_metadata` attribute is not a JSON object"),
    (_metadata(np.array([1, 2])), "its `agile_metadata` attribute is not a JSON object"),
], ids=["lazily-allocated-huge", "external-link", "self-link", "group-loop", "metadata-not-json",
        "metadata-list", "metadata-array"])
def test_info_of_a_hostile_file_is_one_line_and_exit_2(build, message: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import h5py

    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as handle:
        build(handle)
    assert main(["dataset", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agile dataset info: {path}: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
