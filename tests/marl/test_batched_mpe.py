"""The batched MPE (`agile_marl.mpe`) against mpe2: the same spaces, observations, rewards and
episode ends, step by step (mpe2's state injected before every step) and over whole episodes
(injected only at reset); its vector env against `PettingZooVecEnv` over mpe2 through
`make_vec_env`; options it refuses."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env_logger import EnvLogger

from agile_marl.envs import PettingZooVecEnv, make_vec_env
from agile_marl.envs.factory import native_vector_creator
from agile_marl.mpe import SCENARIOS
from agile_marl.mpe.vector import MPEVecEnv
from agile_marl.specs.env import MultiAgentEnvSpec

TOL = 1e-5
ROWS = 3
"""Sub-envs of the batched env, each paired with its own mpe2 env."""

CASES: list[tuple[str, dict[str, Any]]] = [
    *((name, {"continuous_actions": continuous}) for name in SCENARIOS for continuous in (False, True)),
    ("simple_spread_v3", {"N": 4, "local_ratio": 0.25, "terminate_on_success": True, "max_cycles": 40}),
    ("simple_spread_v3", {"num_agent_neighbors": 1, "num_landmark_neighbors": 4, "continuous_actions": True}),
    ("simple_tag_v3", {"num_good": 2, "num_adversaries": 2, "num_obstacles": 3, "terminate_on_success": True}),
    ("simple_tag_v3", {"num_agent_neighbors": 2, "num_landmark_neighbors": 3, "continuous_actions": True}),
    ("simple_adversary_v3", {"N": 3, "num_agent_neighbors": 2, "num_landmark_neighbors": 1}),
    ("simple_reference_v3", {"local_ratio": 0.9, "max_cycles": 10}),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in config.items())}" for name, config in CASES]


@pytest.fixture(autouse=True)
def _quiet_pettingzoo() -> Iterator[None]:
    """mpe2 logs a warning for every clipped out-of-bounds continuous action."""
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


def mpe2_env(name: str, config: dict[str, Any]) -> Any:
    return importlib.import_module(f"mpe2.{name}").parallel_env(**config)


def batched(name: str) -> Any:
    return importlib.import_module(f"agile_marl.mpe.{name}")


def random_actions(rng: np.random.Generator, action_spaces: dict[str, spaces.Space], rows: int) -> dict[str, np.ndarray]:
    """Random action rows; continuous ones a little outside ``[0, 1]`` now and then (mpe2 clips)."""
    actions = {}
    for agent, space in action_spaces.items():
        if isinstance(space, spaces.Discrete):
            actions[agent] = rng.integers(int(space.n), size=rows)
        else:
            actions[agent] = rng.uniform(-0.1, 1.1, size=(rows, *(space.shape or ()))).astype(np.float32)
    return actions


def row_actions(actions: dict[str, np.ndarray], row: int, agents: list[str]) -> dict[str, Any]:
    return {a: int(actions[a][row]) if actions[a].ndim == 1 else actions[a][row].copy() for a in agents}


def squeeze(env: Any, factor: float) -> None:
    """Pull every entity of an mpe2 env towards the origin (contacts and collisions galore)."""
    for entity in env.unwrapped.world.entities:
        entity.state.p_pos = entity.state.p_pos * factor


def assert_step_equal(ref: tuple[Any, ...], mine: tuple[Any, ...], row: int, where: str) -> None:
    """One mpe2 step's outputs against row `row` of the batched vector env's step."""
    obs, rewards, terminations, truncations = ref[:4]
    assert set(obs) == set(mine[0]), where
    for agent in obs:
        np.testing.assert_allclose(mine[0][agent][row], obs[agent], atol=TOL, rtol=0, err_msg=f"{where} obs {agent}")
        np.testing.assert_allclose(mine[1][agent][row], rewards[agent], atol=TOL, rtol=TOL,
                                   err_msg=f"{where} reward {agent}")
        assert mine[2][agent][row] == terminations[agent], f"{where} termination {agent}"
        assert mine[3][agent][row] == truncations[agent], f"{where} truncation {agent}"


# ---------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize(("name", "config"), CASES, ids=IDS)
def test_every_step_from_injected_mpe2_state(name: str, config: dict[str, Any]) -> None:
    """Before every step each sub-env gets its mpe2 env's state; both step with the same actions."""
    refs = [mpe2_env(name, config) for _ in range(ROWS)]
    env = batched(name).vector_env(ROWS, **config)
    rng = np.random.default_rng(len(name) + 7 * len(config))
    starts = 0
    for step in range(70):
        for row, ref in enumerate(refs):
            if not getattr(ref, "agents", None):  # before the first reset too
                ref.reset(seed=int(rng.integers(1 << 30)))
                starts += 1
                if starts % 2:
                    squeeze(ref, rng.uniform(0.05, 0.3))
            env.inject_state(row, ref)
        actions = random_actions(rng, env.action_spaces, ROWS)
        mine = env.step(actions)
        for row, ref in enumerate(refs):
            assert_step_equal(ref.step(row_actions(actions, row, ref.agents)), mine, row, f"step {step} row {row}")


@pytest.mark.parametrize(("name", "config"), CASES, ids=IDS)
def test_whole_episodes_from_state_injected_at_reset(name: str, config: dict[str, Any]) -> None:
    """Seeded alike, sub-env i starts where mpe2 does; after one injection at reset (squeezed
    worlds every other episode) every step agrees until the episode ends."""
    refs = [mpe2_env(name, config) for _ in range(ROWS)]
    env = batched(name).vector_env(ROWS, **config)
    rng = np.random.default_rng(3)
    for episode in range(3):
        seed = 1000 * episode + 11
        obs, _ = env.reset(seed=seed)
        for row, ref in enumerate(refs):
            ref_obs, _ = ref.reset(seed=seed + row)
            for agent in ref_obs:
                np.testing.assert_allclose(obs[agent][row], ref_obs[agent], atol=TOL, rtol=0)
            if episode % 2:
                squeeze(ref, 0.15)
            env.inject_state(row, ref)
        live = list(range(ROWS))
        steps = 0
        while live:
            actions = random_actions(rng, env.action_spaces, ROWS)
            mine = env.step(actions)
            steps += 1
            for row in list(live):
                ref = refs[row]
                assert_step_equal(ref.step(row_actions(actions, row, ref.agents)), mine, row,
                                  f"episode {episode} step {steps} row {row}")
                assert mine[4]["episode_over"][row] == (not ref.agents)
                if not ref.agents:
                    live.remove(row)
        assert steps <= config.get("max_cycles", 25)


@pytest.mark.parametrize(("name", "config"), [
    ("simple_spread_v3", {"terminate_on_success": True}),
    ("simple_tag_v3", {"num_good": 2, "num_adversaries": 2, "terminate_on_success": True}),
])
def test_crafted_states_success_speed_limits_and_contacts(name: str, config: dict[str, Any]) -> None:
    """States random play rarely reaches: every landmark covered (spread) or every prey caught
    (tag), so both terminate; agents far over their speed limit; entities right on top of each other."""
    refs = [mpe2_env(name, config) for _ in range(ROWS)]
    env = batched(name).vector_env(ROWS, **config)
    rng = np.random.default_rng(0)
    for row, ref in enumerate(refs):
        ref.reset(seed=row)
        world = ref.unwrapped.world
        agents = world.agents
        if row == 0 and name == "simple_spread_v3":
            for agent, landmark in zip(agents, world.landmarks, strict=True):
                agent.state.p_pos = landmark.state.p_pos + 0.01
        elif row == 0:
            prey = [a for a in agents if not a.adversary]
            for hunter, target in zip([a for a in agents if a.adversary], prey, strict=True):
                hunter.state.p_pos = target.state.p_pos + 0.02
        elif row == 1:
            for agent in agents:
                agent.state.p_vel = rng.uniform(-8, 8, 2)
        else:
            squeeze(ref, 0.01)
        env.inject_state(row, ref)
    actions = {agent: np.zeros(ROWS, dtype=np.int64) for agent in env.agents}
    mine = env.step(actions)
    for row, ref in enumerate(refs):
        assert_step_equal(ref.step(row_actions(actions, row, ref.agents)), mine, row, f"row {row}")
    assert mine[2][env.agents[0]].tolist() == [True, False, True]  # squeezed together: all covered / caught
    if name == "simple_tag_v3":  # every agent was far over its speed limit: now right at it
        speed = np.hypot(*env.engine.world.vel[1, :len(env.agents)].T)
        np.testing.assert_allclose(speed, env.scenario.layout.max_speed[:len(env.agents)], rtol=1e-12)


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("name", SCENARIOS)
def test_parallel_env_plays_mpe2_episodes(name: str, continuous: bool) -> None:
    """The one-sub-env ParallelEnv: same spaces, seeded episodes, ``state()`` and end of episode."""
    config = {"max_cycles": 6, "continuous_actions": continuous}
    ref, mine = mpe2_env(name, config), batched(name).parallel_env(**config)
    assert mine.possible_agents == ref.possible_agents and mine.metadata["name"] == ref.metadata["name"]
    assert mine.state_space == ref.state_space
    rng = np.random.default_rng(0)
    for seed in (0, 1):
        ref_obs, ref_infos = ref.reset(seed=seed)
        obs, infos = mine.reset(seed=seed)
        assert infos == ref_infos and set(obs) == set(ref_obs)
        np.testing.assert_allclose(mine.state(), ref.state(), atol=TOL, rtol=0)
        while ref.agents:
            actions = random_actions(rng, {a: ref.action_space(a) for a in ref.agents}, 1)
            step_actions = row_actions(actions, 0, ref.agents)
            expected, got = ref.step(step_actions), mine.step(step_actions)
            for index in range(4):
                assert set(got[index]) == set(expected[index])
                for agent, value in expected[index].items():
                    np.testing.assert_allclose(got[index][agent], value, atol=TOL, rtol=TOL)
                    assert type(got[index][agent]) is type(value) or index == 0
            assert got[4] == expected[4] and mine.agents == ref.agents
        assert mine.step({}) == ({}, {}, {}, {}, {})


# ---------------------------------------------------------------------------- spaces and options
@pytest.mark.parametrize(("name", "config"), CASES, ids=IDS)
def test_spaces_are_mpe2s(name: str, config: dict[str, Any]) -> None:
    ref = mpe2_env(name, config)
    for env in (batched(name).parallel_env(**config), batched(name).vector_env(2, **config)):
        assert list(env.possible_agents) == ref.possible_agents
        for agent in ref.possible_agents:
            expected = (ref.observation_space(agent), ref.action_space(agent))
            got = ((env.observation_space(agent), env.action_space(agent)) if hasattr(env, "observation_space")
                   else (env.observation_spaces[agent], env.action_spaces[agent]))
            assert got == expected and [s.dtype for s in got] == [s.dtype for s in expected], agent


@pytest.mark.parametrize(("name", "options", "error", "message"), [
    ("simple_spread_v3", {"render_mode": "human"}, ValueError, "render_mode='human' is not supported"),
    ("simple_v3", {"render_mode": "rgb_array"}, ValueError, "render_mode"),
    ("simple_tag_v3", {"benchmark_data": True}, ValueError, "benchmark_data=True is not supported"),
    ("simple_spread_v3", {"curriculum": True}, ValueError, "curriculum=True is not supported"),
    ("simple_tag_v3", {"curriculum": True}, ValueError, "curriculum"),
    ("simple_spread_v3", {"local_ratio": 1.5}, ValueError, "local_ratio is a proportion"),
    ("simple_adversary_v3", {"num_agent_neighbors": 0}, ValueError, "num_agent_neighbors must be a positive"),
    ("simple_speaker_listener_v4", {"N": 3}, TypeError, r"unknown option\(s\) \['N'\]"),
])
def test_unsupported_options_are_refused_by_name(name: str, options: dict[str, Any], error: type[Exception],
                                                 message: str) -> None:
    for creator in (batched(name).parallel_env, lambda **kw: batched(name).vector_env(2, **kw)):
        with pytest.raises(error, match=message):
            creator(**options)
    batched(name).parallel_env(dynamic_rescaling=False)  # rendering only: accepted


def test_out_of_range_discrete_actions_raise_but_autoresetting_rows_are_ignored() -> None:
    env = batched("simple_spread_v3").vector_env(2, seed=0, max_cycles=1)
    env.reset()
    bad = {agent: np.array([0, 5]) for agent in env.agents}
    with pytest.raises(ValueError, match="action 5 of agent 'agent_0' in sub-env 1 is not in"):
        env.step(bad)
    env.step({agent: np.array([0, 1]) for agent in env.agents})  # ends both episodes
    *_, info = env.step(bad)  # both sub-envs autoreset: actions ignored
    assert info["autoreset"].all()


# ---------------------------------------------------------------------------- the vector env
def _flat(tree: Any, path: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{path}/{key}").items()}
    if isinstance(tree, tuple):
        return {k: v for index, sub in enumerate(tree) for k, v in _flat(sub, f"{path}[{index}]").items()}
    return {path: tree}


@pytest.mark.parametrize(("name", "config"), [("simple_spread_v3", {"max_cycles": 4}),
                                              ("simple_speaker_listener_v4", {"max_cycles": 3,
                                                                              "continuous_actions": True})])
def test_make_vec_env_native_env_matches_pettingzoo_vec_env_over_mpe2(name: str, config: dict[str, Any]) -> None:
    """Same seed, same sampled actions: every key, dtype, shape and value of reset and step agrees
    with `PettingZooVecEnv` over mpe2, through two autoresets."""
    ref = make_vec_env(MultiAgentEnvSpec(name=f"mpe2.{name}", num_envs=3, config=config), seed=1)
    env = make_vec_env(MultiAgentEnvSpec(name=f"agile_marl.mpe.{name}", num_envs=3, config=config), seed=1)
    assert type(ref) is PettingZooVecEnv and type(env) is MPEVecEnv
    assert env.agents == ref.agents and env.observation_spaces == ref.observation_spaces
    assert env.action_spaces == ref.action_spaces
    outputs = [(_flat(ref.reset()), _flat(env.reset()))]
    for _ in range(2 * config["max_cycles"] + 2):
        actions = ref.sample_actions()
        assert _flat(actions).keys() == _flat(env.sample_actions()).keys()
        outputs.append((_flat(ref.step(actions)), _flat(env.step(actions))))
    for step, (expected, got) in enumerate(outputs):
        assert got.keys() == expected.keys(), step
        for key, value in expected.items():
            if isinstance(value, list):  # info["infos"]: per sub-env, per agent
                assert got[key] == value, (step, key)
                continue
            assert type(got[key]) is np.ndarray and got[key].dtype == value.dtype and got[key].shape == value.shape
            np.testing.assert_allclose(got[key], value, atol=TOL, rtol=0, err_msg=f"step {step} {key}")
    ends = [out[1]["[4]/episode_over"].all() for out in outputs[1:]]
    resets = [out[1]["[4]/autoreset"].all() for out in outputs[1:]]
    cycle = config["max_cycles"]
    assert ends[cycle - 1] and resets[cycle] and not ends[cycle] and ends[2 * cycle]
    assert not outputs[cycle][1][f"[4]/alive/{env.agents[0]}"].any()
    assert outputs[cycle + 1][1][f"[4]/alive/{env.agents[0]}"].all()
    assert not outputs[cycle + 1][1][f"[4]/valid/{env.agents[0]}"].any()


def test_widened_copies_the_scenario_and_steps() -> None:
    env = make_vec_env(MultiAgentEnvSpec(name="agile_marl.mpe.simple_tag_v3", num_envs=2,
                                         config={"num_obstacles": 1, "max_cycles": 2}), seed=0)
    assert isinstance(env, MPEVecEnv)
    wide = env.widened(3)
    assert type(wide) is MPEVecEnv and wide.num_envs == 6 and wide.agents == env.agents and wide.copy == env.copy
    assert wide.observation_spaces == env.observation_spaces and wide.scenario.config == env.scenario.config
    obs, _ = wide.reset(seed=5)
    narrow, _ = env.reset(seed=5)
    for agent in env.agents:  # sub-env i is seeded with seed + i in both
        np.testing.assert_array_equal(obs[agent][:2], narrow[agent])
    for _ in range(3):
        *_, info = wide.step(wide.sample_actions())
    assert info["autoreset"].all()
    with pytest.raises(ValueError, match="copies must be >= 1"):
        env.widened(0)
    env.close()
    assert env.closed


def test_native_vector_env_only_for_plain_in_process_specs() -> None:
    name = "agile_marl.mpe.simple_spread_v3"
    assert native_vector_creator(MultiAgentEnvSpec(name=name)) is not None
    assert native_vector_creator(MultiAgentEnvSpec(name=name, sync=False)) is None
    assert native_vector_creator(MultiAgentEnvSpec(name="mpe2.simple_spread_v3")) is None
    wrapped = MultiAgentEnvSpec(name=name, num_envs=2, wrappers=["tests.marl.toy_envs.RewardScale"])
    assert native_vector_creator(wrapped) is None
    env = make_vec_env(wrapped, seed=0)
    assert type(env) is PettingZooVecEnv and env.agents == ["agent_0", "agent_1", "agent_2"]
    env.reset()
    env.step(env.sample_actions())


def test_throughput_benchmark_runs() -> None:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "mpe_throughput.py"
    spec = importlib.util.spec_from_file_location("mpe_throughput", path)
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    (result,) = benchmark.main(["--scenarios", "simple_v3", "--num-envs", "2", "--seconds", "0.02", "--repeats", "1"])
    assert result["mpe2"] > 0 and result["batched"] > 0 and result["ratio"] == result["batched"] / result["mpe2"]
