"""HDF5 and Minari datasets: round trips, field-level errors, space checks, atomic writes."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from gymnasium import spaces

from agile_offline.datasets import (
    DatasetError,
    TransitionData,
    check_minari_id,
    check_spaces,
    load_dataset,
    load_minari,
    read_metadata,
    write_hdf5,
    write_minari,
)

OBS_SPACE = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = spaces.Discrete(2)
DICT_SPACE = spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
                          "grid": spaces.Box(0, 255, (2, 3), np.uint8)})


def _episodes(lengths: list[int], *, truncate_last: bool = False, seed: int = 0, dict_obs: bool = False,
              tail: int = 0) -> TransitionData:
    """Contiguous episodes of the given lengths (plus `tail` unfinished rows); rewards are 1 per step."""
    rng = np.random.default_rng(seed)
    obs_parts, next_parts, terms, truncs = [], [], [], []
    sizes = [*lengths, tail] if tail else list(lengths)
    for index, length in enumerate(sizes):
        chain = rng.uniform(-1, 1, (length + 1, 3)).astype(np.float32)
        obs_parts.append(chain[:-1])
        next_parts.append(chain[1:])
        done = np.zeros(length, bool)
        finished = index < len(lengths)
        cut = truncate_last and index == len(lengths) - 1
        term, trunc = done.copy(), done.copy()
        if finished:
            (trunc if cut else term)[-1] = True
        terms.append(term)
        truncs.append(trunc)
    obs, next_obs = np.concatenate(obs_parts), np.concatenate(next_parts)
    n = len(obs)
    observations: np.ndarray | dict[str, np.ndarray] = obs
    next_observations: np.ndarray | dict[str, np.ndarray] = next_obs
    if dict_obs:
        grid = rng.integers(0, 255, (n + 1, 2, 3), dtype=np.uint8)
        observations = {"pos": obs[:, :2], "grid": grid[:-1]}
        next_observations = {"pos": next_obs[:, :2], "grid": grid[1:]}
        # keep the grid chained within episodes: next grid row = following grid row
    return TransitionData(observations=observations, actions=rng.integers(0, 2, n), rewards=np.ones(n, np.float32),
                          next_observations=next_observations, terminations=np.concatenate(terms),
                          truncations=np.concatenate(truncs))


def _assert_same(a: TransitionData, b: TransitionData) -> None:
    def leaves(value: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return value if isinstance(value, dict) else {"": value}

    for field in ("observations", "next_observations"):
        left, right = leaves(getattr(a, field)), leaves(getattr(b, field))
        assert left.keys() == right.keys()
        for key in left:
            np.testing.assert_array_equal(left[key], right[key])
            assert left[key].dtype == right[key].dtype
    for field in ("actions", "rewards", "terminations", "truncations"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert b.rewards.dtype == np.float32 and b.terminations.dtype == bool and b.truncations.dtype == bool


def _write_raw(path: Path, **fields: object) -> Path:
    with h5py.File(path, "w") as handle:
        for name, value in fields.items():
            if isinstance(value, dict):
                group = handle.create_group(name)
                for key, item in value.items():
                    group.create_dataset(key, data=item)
            else:
                handle.create_dataset(name, data=value)
    return path


def _fields(n: int = 5) -> dict[str, object]:
    return {"observations": np.zeros((n, 3), np.float32), "actions": np.zeros(n, np.int64),
            "rewards": np.ones(n, np.float32), "next_observations": np.zeros((n, 3), np.float32),
            "terminations": np.eye(1, n, n - 1, dtype=bool)[0], "truncations": np.zeros(n, bool)}


# ------------------------------------------------------------------ TransitionData
def test_episode_returns_split_at_terminations_and_truncations_and_skip_the_unfinished_tail() -> None:
    data = _episodes([3, 5, 2], truncate_last=True, tail=4)
    data.rewards = np.arange(len(data), dtype=np.float32)
    assert len(data) == 14
    assert data.episode_returns() == [0 + 1 + 2, 3 + 4 + 5 + 6 + 7, 8 + 9]
    assert data.episode_lengths() == [3, 5, 2]
    assert data.summary()["truncations"] == 1 and data.summary()["episodes"] == 3


# ------------------------------------------------------------------ HDF5
def test_hdf5_round_trip_with_metadata(tmp_path: Path) -> None:
    data = _episodes([4, 6], truncate_last=True)
    path = write_hdf5(data, tmp_path / "sub" / "data.h5", metadata={"env": "CartPole-v1", "epsilon": 0.1})
    assert path == tmp_path / "sub" / "data.h5"
    _assert_same(data, load_dataset(path))
    _assert_same(data, load_dataset(str(path)))
    assert read_metadata(path) == {"env": "CartPole-v1", "epsilon": 0.1}
    assert [p.name for p in path.parent.iterdir()] == ["data.h5"]  # no temporary file left


def test_hdf5_round_trip_dict_observations_as_groups(tmp_path: Path) -> None:
    data = _episodes([3, 4], dict_obs=True)
    path = write_hdf5(data, tmp_path / "dict.h5")
    with h5py.File(path, "r") as handle:
        assert isinstance(handle["observations"], h5py.Group)
        assert set(handle["observations"]) == {"pos", "grid"}
    loaded = load_dataset(path)
    _assert_same(data, loaded)
    check_spaces(loaded, DICT_SPACE, ACT_SPACE, "dict.h5")


def test_load_from_open_h5py_file_and_group(tmp_path: Path) -> None:
    data = _episodes([3])
    path = write_hdf5(data, tmp_path / "data.h5")
    with h5py.File(path, "r") as handle:
        _assert_same(data, load_dataset(handle))
    with h5py.File(tmp_path / "nested.h5", "w") as handle:
        group = handle.create_group("run1")
        for name, value in _fields(4).items():
            group.create_dataset(name, data=value)
    with h5py.File(tmp_path / "nested.h5", "r") as handle:
        assert len(load_dataset(handle["run1"])) == 4
        with pytest.raises(DatasetError, match=r"nested\.h5: missing field `observations`.*`run1`"):
            load_dataset(handle)


def test_load_from_in_memory_mapping_with_nested_dict_observations() -> None:
    data = _episodes([2, 3], dict_obs=True)
    mapping = {"observations": data.observations, "actions": data.actions.tolist(), "rewards": data.rewards,
               "next_observations": data.next_observations, "terminations": data.terminations,
               "truncations": data.truncations}
    _assert_same(data, load_dataset(mapping))


def test_terminals_variant_with_and_without_timeouts(tmp_path: Path) -> None:
    fields = _fields(6)
    fields["terminals"] = fields.pop("terminations")
    del fields["truncations"]
    loaded = load_dataset(_write_raw(tmp_path / "d4rl.h5", **fields))
    assert loaded.terminations.tolist() == [False] * 5 + [True]
    assert not loaded.truncations.any()
    fields["timeouts"] = np.array([0, 0, 1, 0, 0, 0])
    loaded = load_dataset(_write_raw(tmp_path / "d4rl2.h5", **fields))
    assert loaded.truncations.tolist() == [False, False, True, False, False, False]
    assert loaded.episode_lengths() == [3, 3]


def test_column_vectors_of_rewards_and_flags_are_accepted() -> None:
    fields = _fields(4)
    fields["rewards"] = np.ones((4, 1))
    fields["terminations"] = np.array([[0], [0], [0], [1]])
    loaded = load_dataset(fields)
    assert loaded.rewards.shape == (4,) and loaded.rewards.dtype == np.float32
    assert loaded.terminations.tolist() == [False, False, False, True]


# ------------------------------------------------------------------ HDF5 errors
def test_missing_file_directory_and_non_hdf5_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope\.h5: no such file"):
        load_dataset(tmp_path / "nope.h5")
    with pytest.raises(DatasetError, match="is a directory"):
        load_dataset(tmp_path)
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(DatasetError, match=r"text\.h5: cannot be read as an HDF5 file"):
        load_dataset(tmp_path / "text.h5")
    with pytest.raises(DatasetError, match="expected a path"):
        load_dataset(42)  # type: ignore[arg-type]


def test_missing_field_lists_the_fields_present(tmp_path: Path) -> None:
    fields = _fields()
    del fields["rewards"]
    path = _write_raw(tmp_path / "data.h5", **fields)
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    message = str(info.value)
    assert message.startswith(f"{path}: missing field `rewards`")
    assert "fields present: `actions`, `next_observations`, `observations`, `terminations`, `truncations`" in message


def test_missing_next_observations_says_it_is_required(tmp_path: Path) -> None:
    fields = _fields()
    del fields["next_observations"]
    with pytest.raises(DatasetError, match=r"missing field `next_observations` \(HDF5 datasets need the observation"):
        load_dataset(_write_raw(tmp_path / "data.h5", **fields))


def test_mismatched_rows_name_both_fields_and_shapes(tmp_path: Path) -> None:
    fields = _fields(10)
    fields["rewards"] = np.ones(9, np.float32)
    path = _write_raw(tmp_path / "data.h5", **fields)
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    assert str(info.value) == (f"{path}: `rewards` has 9 rows (shape (9,)) but `observations` has 10 (shape (10, 3)); "
                               f"every field needs one row per transition")
    fields = _fields(10)
    fields["truncations"] = np.zeros(11, bool)
    with pytest.raises(DatasetError, match="`truncations` has 11 rows"):
        load_dataset(fields)
    fields = _fields(10)
    fields["observations"] = {"a": np.zeros((10, 2)), "b": np.zeros((8, 2))}
    fields["next_observations"] = fields["observations"]
    with pytest.raises(DatasetError, match="`observations/b` has 8 rows"):
        load_dataset(fields)


@pytest.mark.parametrize(("present", "pattern"), [
    ({"terminals", "terminations"}, "both `terminals` and `terminations`/`truncations`"),
    ({"terminations"}, "has `terminations` but no `truncations`"),
    ({"truncations"}, "has `truncations` but no `terminations`"),
    (set(), r"missing field `terminations` and `truncations` \(or `terminals`\)"),
])
def test_flag_conventions(present: set[str], pattern: str) -> None:
    fields = _fields()
    flags = {"terminals": fields.pop("terminations"), "terminations": fields["truncations"]}
    flags["truncations"] = fields.pop("truncations")
    fields.update({name: flags[name] for name in present})
    with pytest.raises(DatasetError, match=pattern):
        load_dataset(fields, name="data.h5")


def test_empty_dataset_non_finite_rewards_and_bad_flags() -> None:
    with pytest.raises(DatasetError, match=r"data\.h5: the dataset is empty \(0 transitions\)"):
        load_dataset(_fields(0), name="data.h5")
    fields = _fields(6)
    fields["rewards"] = np.array([0, 1, np.nan, 2, np.inf, 0], np.float32)
    with pytest.raises(DatasetError, match=r"`rewards` has 2 rows with non-finite values \(first at row 2: \[nan\]\)"):
        load_dataset(fields)
    for name in ("observations", "next_observations"):  # e.g. a logger that wrote NaN for a missing sensor
        fields = _fields(6)
        fields[name][3, 1] = np.nan  # type: ignore[index]
        with pytest.raises(DatasetError, match=rf"`{name}` has 1 row with non-finite values \(first at row 3: "):
            load_dataset(fields)
    fields = _fields(3)
    fields["terminations"] = np.array([0, 2, 1])
    with pytest.raises(DatasetError, match="`terminations` holds 2 at row 1; flags must be 0/1"):
        load_dataset(fields)


def test_observation_layouts_must_agree() -> None:
    fields = _fields(4)
    fields["next_observations"] = np.zeros((4, 2))
    with pytest.raises(DatasetError, match=r"`next_observations` rows have shape \(2,\) but `observations` rows have "
                                           r"shape \(3,\)"):
        load_dataset(fields)
    fields["next_observations"] = {"a": np.zeros((4, 3))}
    with pytest.raises(DatasetError, match="`observations` is one array but `next_observations` is a group"):
        load_dataset(fields)
    fields["observations"] = {"b": np.zeros((4, 3))}
    with pytest.raises(DatasetError, match=r"keys \['b'\] but `next_observations` has \['a'\]"):
        load_dataset(fields)
    fields = _fields(4)
    fields["actions"] = np.array(["a", "b", "c", "d"])
    with pytest.raises(DatasetError, match="`actions` holds <U1 values"):
        load_dataset(fields)


def test_write_hdf5_is_atomic_and_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_hdf5(_episodes([3]), tmp_path / "data.h5")
    before = path.read_bytes()

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(h5py.Group, "create_dataset", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        write_hdf5(_episodes([5]), path)
    with pytest.raises(RuntimeError, match="disk full"):
        write_hdf5(_episodes([5]), tmp_path / "new.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5"]
    assert path.read_bytes() == before


def test_write_hdf5_refuses_bad_targets(tmp_path: Path) -> None:
    data = _episodes([3])
    write_hdf5(data, tmp_path / "data.h5")
    with pytest.raises(DatasetError, match="already exists"):
        write_hdf5(data, tmp_path / "data.h5", overwrite=False)
    with pytest.raises(DatasetError, match="is a directory"):
        write_hdf5(data, tmp_path)
    with pytest.raises(DatasetError, match="cannot create the folder"):
        write_hdf5(data, tmp_path / "data.h5" / "inner.h5")
    with pytest.raises(DatasetError, match="metadata is not JSON-serialisable"):
        write_hdf5(data, tmp_path / "meta.h5", metadata={"x": object()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5"]


# ------------------------------------------------------------------ check_spaces
def test_check_spaces_accepts_matching_and_names_both_shapes() -> None:
    data = _episodes([3, 2])
    check_spaces(data, OBS_SPACE, ACT_SPACE, "data.h5")
    check_spaces(data, OBS_SPACE, spaces.Discrete(3), "data.h5")
    with pytest.raises(DatasetError) as info:
        check_spaces(data, spaces.Box(-1, 1, (8,)), ACT_SPACE, "data.h5")
    assert str(info.value) == "data.h5: observations have shape (3,) per row, the env's observation space is Box(8,)"
    with pytest.raises(DatasetError, match=r"actions hold values 0\.\.1, the env's action space is "
                                           r"Discrete\(2, start=5\) \(valid: 5\.\.6\)"):
        check_spaces(data, OBS_SPACE, spaces.Discrete(2, start=5), "data.h5")
    with pytest.raises(DatasetError, match=r"actions have shape \(\) per row, the env's action space is Box\(2,\)"):
        check_spaces(data, OBS_SPACE, spaces.Box(-1, 1, (2,)), "data.h5")
    data.actions = data.actions + 0.5
    with pytest.raises(DatasetError, match="actions hold non-integer values"):
        check_spaces(data, OBS_SPACE, ACT_SPACE, "data.h5")
    data.actions = np.zeros((len(data), 2), np.float32)
    check_spaces(data, OBS_SPACE, spaces.Box(-1, 1, (2,)), "data.h5")


def test_check_spaces_dict_observations() -> None:
    data = _episodes([3], dict_obs=True)
    check_spaces(data, DICT_SPACE, ACT_SPACE, "d.h5")
    with pytest.raises(DatasetError, match=r"observations have keys \['grid', 'pos'\], the env's observation space "
                                           r"has keys \['grid', 'pos', 'vel'\]"):
        check_spaces(data, spaces.Dict({**DICT_SPACE.spaces, "vel": OBS_SPACE}), ACT_SPACE, "d.h5")
    with pytest.raises(DatasetError, match=r"observations/pos have shape \(2,\) per row, the env's observation "
                                           r"space\['pos'\] is Box\(3,\)"):
        check_spaces(data, spaces.Dict({"pos": OBS_SPACE, "grid": DICT_SPACE["grid"]}), ACT_SPACE, "d.h5")
    with pytest.raises(DatasetError, match="observations are a group with keys"):
        check_spaces(data, OBS_SPACE, ACT_SPACE, "d.h5")
    with pytest.raises(DatasetError, match=r"observations are one array of shape \(3,\) per row"):
        check_spaces(_episodes([3]), DICT_SPACE, ACT_SPACE, "d.h5")


# ------------------------------------------------------------------ Minari
@pytest.fixture
def minari_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def test_minari_round_trip(minari_path: Path) -> None:
    import minari

    data = _episodes([4, 2, 5], truncate_last=True, tail=3)
    folder = write_minari(data, "agile/test-v0", None, observation_space=OBS_SPACE, action_space=ACT_SPACE,
                          algorithm_name="random")
    assert folder == minari_path / "agile" / "test-v0"
    assert list(minari.list_local_datasets()) == ["agile/test-v0"]
    dataset = minari.load_dataset("agile/test-v0")
    assert dataset.total_episodes == 4 and dataset.total_steps == 14
    loaded = load_minari("agile/test-v0")
    _assert_same(data, loaded)
    assert loaded.episode_returns() == [4.0, 2.0, 5.0]
    assert not any(p.name.startswith(".") for p in minari_path.iterdir())  # the staging folder is gone


def test_minari_round_trip_dict_observations_with_env(minari_path: Path) -> None:
    import gymnasium as gym

    data = _episodes([3, 3], dict_obs=True)
    # the grid must chain inside episodes for Minari's one-sequence-per-episode layout
    grid = np.random.default_rng(1).integers(0, 255, (len(data) + 2, 2, 3), dtype=np.uint8)
    data.observations["grid"] = np.concatenate([grid[0:3], grid[4:7]])  # type: ignore[index]
    data.next_observations["grid"] = np.concatenate([grid[1:4], grid[5:8]])  # type: ignore[index]
    env = gym.make("CartPole-v1")
    write_minari(data, "dict-v1", "CartPole-v1", observation_space=DICT_SPACE, action_space=env.action_space)
    _assert_same(data, load_minari("dict-v1"))


def test_minari_missing_malformed_and_existing_ids(minari_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_minari("agile/absent-v0")
    message = str(info.value)
    assert str(minari_path) in message and "nothing is downloaded" in message
    assert "agile dataset record --env ENV_ID --episodes N --minari-id agile/absent-v0" in message
    for bad in ("no-version", "agile/bad id-v0", "agile/x-vA", "/x-v0"):
        with pytest.raises(DatasetError, match="is malformed"):
            check_minari_id(bad)
    check_minari_id("a/b/c_d-v12")
    data = _episodes([2])
    write_minari(data, "agile/x-v0", None, observation_space=OBS_SPACE, action_space=ACT_SPACE)
    with pytest.raises(DatasetError, match="already exists at"):
        write_minari(data, "agile/x-v0", None, observation_space=OBS_SPACE, action_space=ACT_SPACE)
    with pytest.raises(DatasetError, match="local datasets: agile/x-v0"):
        load_minari("agile/x-v1")


def test_minari_refuses_non_contiguous_episodes(minari_path: Path) -> None:
    data = _episodes([4])
    data.next_observations = data.next_observations.copy()  # type: ignore[union-attr]
    data.next_observations[1] += 1.0  # type: ignore[index]
    with pytest.raises(DatasetError, match="`next_observations` row 1 differs from `observations` row 2"):
        write_minari(data, "agile/broken-v0", None, observation_space=OBS_SPACE, action_space=ACT_SPACE)
    assert not (minari_path / "agile").exists()


def test_write_minari_is_atomic(minari_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import minari
    from minari.dataset import minari_storage

    def boom(self: object, episodes: object) -> None:
        raise RuntimeError("interrupted")

    monkeypatch.setattr(minari_storage.MinariStorage, "update_episodes", boom, raising=False)
    from minari.dataset._storages import hdf5_storage

    monkeypatch.setattr(hdf5_storage.HDF5Storage, "update_episodes", boom)
    with pytest.raises(RuntimeError, match="interrupted"):
        write_minari(_episodes([3]), "agile/half-v0", None, observation_space=OBS_SPACE, action_space=ACT_SPACE)
    assert minari.list_local_datasets() == {}
    leftovers = [p for p in minari_path.rglob("*") if "half" in p.name or p.name.startswith(".agile")]
    assert leftovers == []
    with pytest.raises(DatasetError, match="not found"):
        load_minari("agile/half-v0")


def test_a_corrupt_minari_folder_is_a_dataset_error(minari_path: Path) -> None:
    (minari_path / "agile" / "corrupt-v0" / "data").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"Minari dataset agile/corrupt-v0: cannot be read from .*corrupt-v0"):
        load_minari("agile/corrupt-v0")
