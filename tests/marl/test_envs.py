"""The multi-agent environment layer: spec, factory, PettingZooVecEnv, checks, episode tracker."""

from __future__ import annotations

import functools
import pickle
import random

import numpy as np
import pytest
from gymnasium import spaces
from pydantic import ValidationError

from agile_core.errors import issues_from_validation_error
from agile_marl.envs import (
    FinishedEpisode,
    MultiAgentEnvBuildError,
    MultiAgentEpisodeTracker,
    ParallelEnvError,
    PettingZooVecEnv,
    SubEnvError,
    as_vec_env,
    check_parallel_env,
    make_env_factory,
    make_vec_env,
)
from agile_marl.specs.env import MultiAgentEnvSpec
from tests.marl.toy_envs import (
    BrokenRewardEnv,
    MissingRewardEnv,
    RaisingEnv,
    ToyHeteroEnv,
    WrongObsShapeEnv,
)

T, F = True, False
SHORT = functools.partial(ToyHeteroEnv, a_steps=1, b_steps=3, b_truncates=True)
ACTIONS = {"a_0": np.array([1, 0]), "b_0": np.array([[0.5, 0.0], [0.25, 0.0]], dtype=np.float32)}


def _column(rows: list[np.ndarray]) -> np.ndarray:
    return np.stack(rows)  # [steps, num_envs]


# ---------------------------------------------------------------------------- vector env layout
def test_staggered_agents_autoreset_and_dead_agents() -> None:
    env = PettingZooVecEnv([ToyHeteroEnv, SHORT])
    assert env.num_envs == 2 and env.agents == ["a_0", "b_0"]
    assert env.observation_spaces["b_0"].shape == (5,) and isinstance(env.action_spaces["a_0"], spaces.Discrete)
    obs, info = env.reset(seed=0)
    assert set(info) == {"alive", "infos"} and info["alive"]["a_0"].all() and info["alive"]["b_0"].all()
    assert obs["a_0"].shape == (2, 3) and obs["a_0"].dtype == np.float32 and obs["b_0"].shape == (2, 5)
    steps = [env.step(ACTIONS) for _ in range(6)]
    env.close()

    def seq(index: int, agent: str | None = None, key: str | None = None) -> np.ndarray:
        values = [s[index] if key is None else s[index][key] for s in steps]
        return _column([v if agent is None else v[agent] for v in values])

    # columns: sub-env 0 (a_0 leaves after 2 steps, b_0 after 4), sub-env 1 (1 and 3, b_0 truncated)
    np.testing.assert_array_equal(seq(1, "a_0"), [[2, 1], [3, 0], [0, 0], [0, 0], [0, 1], [2, 0]])
    np.testing.assert_array_equal(seq(1, "b_0"), [[10.5, 10.25], [20.5, 20.25], [30.5, 30.25],
                                                  [40.5, 0], [0, 10.25], [10.5, 20.25]])
    np.testing.assert_array_equal(seq(2, "a_0"), [[F, T], [T, F], [F, F], [F, F], [F, T], [F, F]])
    np.testing.assert_array_equal(seq(2, "b_0"), [[F, F]] * 3 + [[T, F]] + [[F, F]] * 2)
    np.testing.assert_array_equal(seq(3, "b_0"), [[F, F], [F, F], [F, T], [F, F], [F, F], [F, F]])
    np.testing.assert_array_equal(seq(3, "a_0"), np.zeros((6, 2), dtype=bool))
    np.testing.assert_array_equal(seq(4, "a_0", "valid"), [[T, T], [T, F], [F, F], [F, F], [F, T], [T, F]])
    np.testing.assert_array_equal(seq(4, "b_0", "valid"), [[T, T], [T, T], [T, T], [T, F], [F, T], [T, T]])
    np.testing.assert_array_equal(seq(4, "a_0", "alive"), [[T, F], [F, F], [F, F], [F, T], [T, F], [T, F]])
    np.testing.assert_array_equal(seq(4, "b_0", "alive"), [[T, T], [T, T], [T, F], [F, T], [T, T], [T, T]])
    np.testing.assert_array_equal(seq(4, key="autoreset"), [[F, F], [F, F], [F, F], [F, T], [T, F], [F, F]])
    np.testing.assert_array_equal(seq(4, key="episode_over"), [[F, F], [F, F], [F, T], [T, F], [F, F], [F, F]])
    # observations: [t, noise, episode]; the final obs of a leaving agent, then zeros until the reset
    obs_a, obs_b = seq(0, "a_0"), seq(0, "b_0")
    np.testing.assert_array_equal(obs_a[:, :, 0], [[1, 1], [2, 0], [0, 0], [0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(obs_a[:, :, 2], [[1, 1], [1, 0], [0, 0], [0, 2], [2, 2], [2, 0]])
    for step, sub_env in [(2, 0), (3, 0), (1, 1), (2, 1), (5, 1)]:
        assert not obs_a[step, sub_env].any()
    np.testing.assert_array_equal(obs_b[:, :, 0], [[1, 1], [2, 2], [3, 3], [4, 0], [0, 1], [1, 2]])
    np.testing.assert_array_equal(obs_b[0, :, 3:], [[1, 0.5], [0, 0.25]])
    # raw infos: per sub-env, per agent; an autoreset step gives the reset infos
    assert steps[3][4]["infos"][1] == {"a_0": {"t": 0}, "b_0": {"t": 0}}
    assert steps[2][4]["infos"][0] == {"b_0": {"t": 3}}


def test_returned_arrays_are_copies_unless_asked() -> None:
    env = PettingZooVecEnv([ToyHeteroEnv, SHORT])
    obs, _ = env.reset(seed=1)
    first = obs["b_0"].copy()
    next_obs, rewards, *_ = env.step(ACTIONS)
    env.step(ACTIONS)
    np.testing.assert_array_equal(obs["b_0"], first)
    assert rewards["b_0"][0] == 10.5
    shared = PettingZooVecEnv([ToyHeteroEnv], copy=False)
    obs, _ = shared.reset(seed=1)
    next_obs, *_ = shared.step({"a_0": np.array([0]), "b_0": np.zeros((1, 2))})
    assert next_obs["a_0"] is obs["a_0"]


def test_seeding_repeats_and_matches_single_envs() -> None:
    def rollout(seed: int) -> list:
        env = PettingZooVecEnv([ToyHeteroEnv] * 3)
        out = [env.reset(seed=seed)[0]]
        for _ in range(5):
            actions = env.sample_actions()
            out += [actions, env.step(actions)[0]]
        return out

    first, again, other = rollout(7), rollout(7), rollout(8)
    for x, y in zip(first, again, strict=True):
        for agent in x:
            np.testing.assert_array_equal(x[agent], y[agent])
    assert not np.array_equal(first[0]["a_0"], other[0]["a_0"])
    assert not np.array_equal(first[1]["b_0"], other[1]["b_0"])  # the action spaces are seeded too
    for i in range(3):  # sub-env i is reset with seed + i
        single = ToyHeteroEnv()
        np.testing.assert_array_equal(first[0]["a_0"][i], single.reset(seed=7 + i)[0]["a_0"])


def test_constructor_seed_is_the_first_reset_seed() -> None:
    spec = MultiAgentEnvSpec(name="tests.marl.toy_envs", num_envs=2)
    a, b = make_vec_env(spec, seed=4), make_vec_env(spec, seed=None)
    np.testing.assert_array_equal(a.reset()[0]["a_0"], b.reset(seed=4)[0]["a_0"])
    assert not np.array_equal(a.reset()[0]["a_0"][:, 1], b.reset(seed=4)[0]["a_0"][:, 1])  # only the first


def test_widened_and_shared_instances() -> None:
    env = PettingZooVecEnv([SHORT, ToyHeteroEnv])
    wide = env.widened(3)
    assert type(wide) is PettingZooVecEnv and wide.num_envs == 6
    assert [e.a_steps for e in wide.envs] == [1, 2] * 3
    assert not {id(e) for e in wide.envs} & {id(e) for e in env.envs}
    user_env = ToyHeteroEnv(a_steps=3)
    single = as_vec_env(user_env)
    assert single.envs[0] is user_env and as_vec_env(single) is single  # type: ignore[attr-defined]
    copies = single.widened(2)
    assert copies.num_envs == 2 and all(e is not user_env and e.a_steps == 3 for e in copies.envs)  # type: ignore[attr-defined]
    assert copies.envs[0] is not copies.envs[1]  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="ParallelEnv"):
        as_vec_env(object())


@pytest.mark.parametrize("where", ["info", "obs"])
def test_action_masks(where: str) -> None:
    env = PettingZooVecEnv([functools.partial(ToyHeteroEnv, masks=where)] * 2)
    obs, info = env.reset(seed=0)
    assert set(info["action_mask"]) == {"a_0"}  # b_0 has continuous actions
    np.testing.assert_array_equal(info["action_mask"]["a_0"], [[T, T], [T, T]])
    if where == "obs":
        assert set(obs["a_0"]) == {"observation", "action_mask"} and obs["a_0"]["observation"].shape == (2, 3)
        np.testing.assert_array_equal(obs["a_0"]["action_mask"], [[1, 1], [1, 1]])
    *_, info = env.step({"a_0": np.array([1, 1]), "b_0": np.zeros((2, 2))})
    np.testing.assert_array_equal(info["action_mask"]["a_0"], [[T, F], [T, F]])  # t = 1: action 1 masked
    assert (env.sample_actions()["a_0"] == 0).all()
    *_, info = env.step({"a_0": np.array([[0], [0]]), "b_0": np.zeros((2, 2))})  # [n, 1] Discrete actions
    np.testing.assert_array_equal(info["action_mask"]["a_0"], [[T, T], [T, T]])  # a_0 gone: all allowed
    assert not info["alive"]["a_0"].any()
    plain = PettingZooVecEnv([ToyHeteroEnv])
    assert "action_mask" not in plain.reset()[1]


def test_step_errors_name_the_agent_and_sub_env() -> None:
    env = PettingZooVecEnv([ToyHeteroEnv, functools.partial(RaisingEnv, fail_after=2)])
    env.reset(seed=0)
    with pytest.raises(KeyError, match="no actions for agent 'b_0'"):
        env.step({"a_0": np.array([0, 0])})
    with pytest.raises(ValueError, match=r"actions\['b_0'\] has shape \(2,\), expected \(2, 2\)"):
        env.step({"a_0": np.array([0, 0]), "b_0": np.zeros(2)})
    env.step(ACTIONS)
    with pytest.raises(SubEnvError, match=r"sub-env 1: step\(\) raised RuntimeError: toy failure"):
        env.step(ACTIONS)
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(ACTIONS)


# ---------------------------------------------------------------------------- episode tracker
def test_episode_tracker_returns_lengths_and_members() -> None:
    env = PettingZooVecEnv([ToyHeteroEnv] * 2)
    tracker = MultiAgentEpisodeTracker(env.num_envs, env.agents)
    env.reset(seed=0)
    for step in range(10):
        _, rewards, _, _, info = env.step(ACTIONS)
        valid = tracker.step(rewards, info)
        assert valid is info["valid"]
        if step == 3:
            assert len(tracker.finished) == 2
    first = FinishedEpisode({"a_0": 5.0, "b_0": 102.0}, 107.0, 4, 0)
    second = FinishedEpisode({"a_0": 3.0, "b_0": 101.0}, 104.0, 4, 1)
    assert tracker.finished == [first, second, first, second]
    by_member = tracker.pop_finished_by_member(2)
    assert by_member == [[first, first], [second, second]] and tracker.pop_finished() == []
    assert tracker.lengths.tolist() == [0, 0]  # step 10 only reset the sub-envs
    _, rewards, _, _, info = env.step(ACTIONS)
    tracker.step(rewards, info)
    assert tracker.lengths.tolist() == [1, 1] and tracker.returns["b_0"].tolist() == [10.5, 10.25]
    with pytest.raises(ValueError, match="cannot be split"):
        tracker.pop_finished_by_member(3)


# ---------------------------------------------------------------------------- checks
@pytest.mark.parametrize(("env_class", "message"), [
    (BrokenRewardEnv, "env 'toy': step(): rewards['b_0'] is 'x' (str), expected a finite number"),
    (WrongObsShapeEnv, "env 'toy': reset(): obs['a_0'] has shape (4,), expected (3,) (the observation space)"),
    (MissingRewardEnv, "env 'toy': step(): rewards has no entry for live agent 'b_0' (keys: ['a_0'])"),
])
def test_check_messages(env_class: type, message: str) -> None:
    with pytest.raises(ParallelEnvError) as caught:
        check_parallel_env(env_class, "toy")
    assert str(caught.value) == message


def test_check_finished_agents_must_leave_and_sub_envs_must_agree() -> None:
    class Lingering(ToyHeteroEnv):
        def step(self, actions: dict) -> tuple:
            result = super().step(actions)
            self.agents = list(self.possible_agents)
            return result

    with pytest.raises(ParallelEnvError, match=r"env 'l': step\(\): agent 'a_0' terminated or truncated but is "
                                               r"still in env.agents"):
        check_parallel_env(Lingering, "l")
    with pytest.raises(ValueError, match="sub-env 1 has other agents or spaces than sub-env 0"):
        PettingZooVecEnv([ToyHeteroEnv, functools.partial(ToyHeteroEnv, masks="obs")])


def test_check_passes_and_leaves_rng_and_instance_alone() -> None:
    class NoAgents(ToyHeteroEnv):
        def __init__(self) -> None:
            super().__init__()
            self.possible_agents = []

    with pytest.raises(ParallelEnvError, match="env 'empty': possible_agents: is"):
        check_parallel_env(NoAgents, "empty")
    user_env = ToyHeteroEnv(masks="info")
    user_env.reset(seed=3)
    expected = ToyHeteroEnv()
    expected.reset(seed=3)
    np.random.seed(0)
    random.seed(0)
    check_parallel_env(user_env, "toy")
    check_parallel_env(functools.partial(ToyHeteroEnv, masks="obs"), "toy")
    assert (np.random.random(), random.random()) == (np.random.RandomState(0).random_sample(), random.Random(0).random())
    assert user_env.t == 0 and user_env.np_random.uniform() == expected.np_random.uniform()


# ---------------------------------------------------------------------------- spec and factory
def _issue_paths(**fields: object) -> list[tuple]:
    with pytest.raises(ValidationError) as caught:
        MultiAgentEnvSpec(**fields)
    return [issue.path for issue in issues_from_validation_error(caught.value, fields)]


def test_spec_fields_and_errors() -> None:
    spec = MultiAgentEnvSpec(name="mpe2.simple_spread_v3", wrappers=["tests.marl.toy_envs.RewardScale"])
    assert (spec.num_envs, spec.sync, spec.entrypoint, spec.path, spec.config) == (16, True, None, None, {})
    assert spec.wrappers[0].kwargs == {} and not spec.is_custom
    assert MultiAgentEnvSpec(name="My env", path="env.py").is_custom
    assert _issue_paths(name="not a module") == [("name",)]
    assert _issue_paths(name="x", entrypoint="no_colon") == [("entrypoint",)]
    assert _issue_paths(name="x", path="env.py", entrypoint="a:b") == [("entrypoint",)]
    assert _issue_paths(name="x", path="env.txt") == [("path",)]
    assert _issue_paths(name="m.x", num_envs=0) == [("num_envs",)]
    assert _issue_paths(name="m.x", wrappers=["bad name"]) == [("wrappers", 0, "name")]
    assert _issue_paths(name="m.x", env_kwargs={}) == [("env_kwargs",)]


def test_factory_forms_are_picklable(tmp_path) -> None:
    by_module = make_env_factory(MultiAgentEnvSpec(name="tests.marl.toy_envs", config={"a_steps": 3}))
    env = pickle.loads(pickle.dumps(by_module))()
    assert isinstance(env, ToyHeteroEnv) and env.a_steps == 3
    spec = MultiAgentEnvSpec(name="toy", entrypoint="tests.marl.toy_envs:toy_hetero_env",
                             wrappers=[{"name": "tests.marl.toy_envs:RewardScale", "kwargs": {"scale": 2.0}}])
    env = pickle.loads(pickle.dumps(make_env_factory(spec)))()
    env.reset(seed=0)
    assert env.step({"a_0": 1, "b_0": np.zeros(2, np.float32)})[1] == {"a_0": 4.0, "b_0": 20.0}
    (tmp_path / "my_env.py").write_text(
        "from tests.marl.toy_envs import ToyHeteroEnv\n\nclass MyEnv(ToyHeteroEnv):\n    pass\n")
    env = make_env_factory(MultiAgentEnvSpec(name="mine", path="my_env.py"), base_dir=tmp_path)()
    assert type(env).__name__ == "MyEnv"
    spec = MultiAgentEnvSpec(name="mine", path="my_env.py", entrypoint="ToyHeteroEnv")
    assert type(pickle.loads(pickle.dumps(make_env_factory(spec, tmp_path)))()).__name__ == "ToyHeteroEnv"


@pytest.mark.parametrize(("fields", "message"), [
    ({"name": "no_such_module_xyz"}, "environment.name: cannot import module 'no_such_module_xyz'"),
    ({"name": "json"}, "environment.name: module 'json' has no parallel_env()"),
    ({"name": "t", "entrypoint": "tests.marl.toy_envs:Nope"},
     "environment.entrypoint: module 'tests.marl.toy_envs' has no attribute 'Nope'"),
    ({"name": "t", "path": "missing.py"}, "environment.path: no such file"),
    ({"name": "t", "path": "env.py", "entrypoint": "Nope"}, "environment.entrypoint: '"),
    ({"name": "tests.marl.toy_envs", "wrappers": ["tests.marl.toy_envs.Nope"]},
     "environment.wrappers[0].name: module 'tests.marl.toy_envs' has no attribute 'Nope'"),
])
def test_factory_errors_name_the_field(tmp_path, fields: dict, message: str) -> None:
    (tmp_path / "env.py").write_text("X = 1\n")
    with pytest.raises(MultiAgentEnvBuildError) as caught:
        make_env_factory(MultiAgentEnvSpec(**fields), base_dir=tmp_path)
    assert isinstance(caught.value, ValueError) and str(caught.value).startswith(message)


def test_factory_rejects_non_parallel_envs_and_make_vec_env_checks() -> None:
    factory = make_env_factory(MultiAgentEnvSpec(name="d", entrypoint="builtins:dict"))
    with pytest.raises(MultiAgentEnvBuildError, match="built a dict, not a PettingZoo ParallelEnv"):
        factory()
    spec = MultiAgentEnvSpec(name="broken", entrypoint="tests.marl.toy_envs:BrokenRewardEnv", num_envs=2)
    with pytest.raises(ParallelEnvError, match="env 'broken': step"):
        make_vec_env(spec)
    assert make_vec_env(spec, check=False).num_envs == 2


# ---------------------------------------------------------------------------- MPE (mpe2)
def test_mpe2_speaker_listener_continuous_and_spread() -> None:
    spec = MultiAgentEnvSpec(name="mpe2.simple_speaker_listener_v4", num_envs=2,
                             config={"continuous_actions": True, "max_cycles": 3})
    env = make_vec_env(spec, seed=0)
    assert type(env) is PettingZooVecEnv and env.agents == ["speaker_0", "listener_0"]
    assert env.action_spaces["listener_0"].shape == (5,)
    obs, _ = env.reset()
    assert obs["speaker_0"].shape == (2, 3) and obs["listener_0"].shape == (2, 11)
    for _ in range(3):
        obs, rewards, _, truncations, info = env.step(env.sample_actions())
    assert truncations["listener_0"].all() and info["episode_over"].all() and not info["alive"]["speaker_0"].any()
    assert obs["listener_0"].any() and rewards["speaker_0"].dtype == np.float32
    *_, info = env.step(env.sample_actions())
    assert info["autoreset"].all() and info["alive"]["listener_0"].all()
    env.close()
    spread = make_vec_env(MultiAgentEnvSpec(name="mpe2.simple_spread_v3", num_envs=3, config={"max_cycles": 4}), seed=1)
    assert spread.agents == ["agent_0", "agent_1", "agent_2"]
    assert isinstance(spread.action_spaces["agent_0"], spaces.Discrete)
    spread.reset()
    for _ in range(6):
        obs, rewards, *_ = spread.step(spread.sample_actions())
    assert obs["agent_2"].shape == (3, 18) and np.isfinite(rewards["agent_0"]).all()
    spread.close()
