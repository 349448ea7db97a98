"""BanditEnv: disjoint context encoding, rewards and regret, seeding, CSV loading and its errors,
and the paradigm's make_env hook."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agile_offline.bandits.env import BanditDataError, BanditEnv, load_table
from agile_offline.bandits.run import make_env, run_loop
from agile_offline.specs.bandits import BanditEnvSpec

DATA = Path(__file__).resolve().parents[2] / "configs" / "data"


def _toy() -> BanditEnv:
    features = np.array([[1.0, 10.0], [3.0, 10.0], [5.0, 10.0], [7.0, 10.0]])
    return BanditEnv(features, ["b", "a", "b", "c"], seed=0)


def test_arms_spaces_and_disjoint_encoding() -> None:
    env = _toy()
    assert env.arms == ["a", "b", "c"] and env.num_arms == 3 and env.num_envs == 1
    assert env.single_observation_space.shape == (6,) and env.single_action_space.n == 3
    contexts = env.contexts(row=0)
    assert contexts.shape == (3, 6) and contexts.dtype == np.float32
    row = env.features[0]
    for arm in range(3):
        block = contexts[arm].reshape(3, 2)
        np.testing.assert_array_equal(block[arm], row)
        assert not np.delete(block, arm, axis=0).any()
    # standardised: zero mean, unit variance; a constant column stays 0
    np.testing.assert_allclose(env.features[:, 0].mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(env.features[:, 0].std(), 1.0, atol=1e-6)
    assert not env.features[:, 1].any()


def test_reward_and_regret_for_one_arm_and_for_many() -> None:
    env = _toy()
    _, info = env.reset(seed=3)
    target = int(env.targets[info["row"]])
    _, reward, regret, step_info = env.step(target)
    assert (reward, regret, step_info["target"]) == (1.0, 0.0, target)
    row = env.row
    target = int(env.targets[row])
    _, rewards, regrets, _ = env.step(np.array([target, (target + 1) % 3, target]))
    np.testing.assert_array_equal(rewards, [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(regrets, [0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="arm must be an integer"):
        env.step(3)


def test_reset_seed_repeats_rows() -> None:
    env = _toy()
    env.reset(seed=7)
    first = [env.step(0)[3]["row"] for _ in range(20)]
    env.reset(seed=7)
    assert [env.step(0)[3]["row"] for _ in range(20)] == first


def test_iris_table_is_the_real_one() -> None:
    features, labels = load_table(DATA / "iris_features.csv", DATA / "iris_targets.csv")
    assert features.shape == (150, 4)
    assert {label: labels.count(label) for label in set(labels)} == {
        "Iris-setosa": 50, "Iris-versicolor": 50, "Iris-virginica": 50}
    np.testing.assert_allclose(features.mean(axis=0), [5.8433, 3.054, 3.7587, 1.1987], atol=1e-3)


def test_csv_without_header_and_numeric_labels(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("1,2\n3,4\n5,6\n")
    (tmp_path / "y.csv").write_text("0\n1\n1\n")
    features, labels = load_table(tmp_path / "x.csv", tmp_path / "y.csv")
    assert features.shape == (3, 2) and labels == [0, 1, 1]
    (tmp_path / "y2.csv").write_text("label\n2\n1\n1\n")
    assert load_table(tmp_path / "x.csv", tmp_path / "y2.csv")[1] == [2, 1, 1]


def test_csv_errors_name_file_row_and_column(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,oops\n")
    (tmp_path / "y.csv").write_text("y\n0\n1\n")
    with pytest.raises(BanditDataError, match=r"x\.csv: row 3, column 2 \('b'\): 'oops' is not a number"):
        load_table(tmp_path / "x.csv", tmp_path / "y.csv")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    with pytest.raises(BanditDataError, match=r"x\.csv has 3 data rows but .*y\.csv has 2"):
        load_table(tmp_path / "x.csv", tmp_path / "y.csv")
    with pytest.raises(BanditDataError, match=r"missing\.csv: file not found"):
        load_table(tmp_path / "missing.csv", tmp_path / "y.csv")
    (tmp_path / "ragged.csv").write_text("1,2\n3\n")
    with pytest.raises(BanditDataError, match="row 2 has 1 columns, expected 2"):
        load_table(tmp_path / "ragged.csv", tmp_path / "y.csv")
    with pytest.raises(BanditDataError, match="at least 2 distinct targets"):
        BanditEnv(np.ones((3, 2)), ["a", "a", "a"])


def test_make_env_from_spec_relative_to_base_dir(tmp_path: Path) -> None:
    spec = BanditEnvSpec(name="iris", features="data/iris_features.csv", targets="data/iris_targets.csv")
    env = make_env(spec, base_dir=DATA.parent, seed=0)
    assert isinstance(env, BanditEnv) and env.num_arms == 3 and env.single_observation_space.shape == (12,)
    with pytest.raises(ValueError, match="num_envs must be 1"):
        make_env(spec, base_dir=DATA.parent, num_envs=4)


def make_toy(rows: int = 6, seed: int | None = None) -> BanditEnv:
    """An entrypoint for the test below."""
    return BanditEnv(np.arange(rows * 2, dtype=float).reshape(rows, 2), [i % 2 for i in range(rows)], seed=seed)


def test_make_env_from_entrypoint() -> None:
    spec = BanditEnvSpec(name="toy", entrypoint=f"{__name__}:make_toy", config={"rows": 8})
    env = make_env(spec, seed=1)
    assert len(env) == 8 and env.num_arms == 2
    bad = BanditEnvSpec(name="toy", entrypoint=f"{__name__}:nothing_here")
    with pytest.raises(BanditDataError, match="cannot be loaded"):
        make_env(bad)


def test_run_loop_takes_episode_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    import agile_offline.bandits.training as training
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions

    manifest = TrainingManifest.get_validated(DATA.parent / "training" / "neural_ucb_iris.yaml")
    seen: dict = {}

    def fake_run(*args: object, **kwargs: object) -> tuple[list, list]:
        seen.update(kwargs)
        return [], []

    monkeypatch.setattr(training, "run_bandits", fake_run)
    assert run_loop(manifest, None, [], RunOptions(), "cpu") == ([], [])
    assert seen == {"episode_steps": manifest.training.episode_steps}
