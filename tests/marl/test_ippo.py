"""IPPO is written once, over a leading member axis: a single agent's ``learn`` equals a plain
per-agent oracle, a group of ``P`` members with different hyperparameters (and idle members)
learns exactly like ``P`` single agents, acting in a group equals each member's ``get_action``,
and mutation, cloning and checkpoints keep the agent whole."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup, make_member_groups
from agile_marl.buffers.rollout import (
    MultiAgentRolloutBuffer,
    compute_advantages_together,
    population_batch,
)
from agile_marl.ippo import IPPO
from agile_marl.specs.ippo import IPPOSpec
from tests.marl.oracles_ippo import ippo_learn
from tests.marl.test_marl_rollout import life_flags

torch.set_num_threads(1)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
NUM_ENVS = 3
# A group of three agents sharing networks and a speaker of its own (other spaces).
DISCRETE = ({**{f"agent_{i}": spaces.Box(-1.0, 1.0, (5,), np.float32) for i in range(3)},
             "speaker_0": spaces.Box(-1.0, 1.0, (3,), np.float32)},
            {**{f"agent_{i}": spaces.Discrete(4) for i in range(3)}, "speaker_0": spaces.MultiDiscrete([3, 2])})
BOX = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([2.0, 0.5], np.float32))
CONTINUOUS = ({f"agent_{i}": spaces.Box(-1.0, 1.0, (5,), np.float32) for i in range(2)},
              {f"agent_{i}": BOX for i in range(2)})
DICT_OBS = ({"scout_0": spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "id": spaces.Discrete(4)})},
            {"scout_0": spaces.MultiBinary(3)})
MEMBER_HP = [
    {"lr": 1e-3, "batch_size": 16, "update_epochs": 2, "clip_coef": 0.2, "ent_coef": 0.0, "gamma": 0.99},
    {"lr": 3e-4, "batch_size": 25, "update_epochs": 3, "clip_coef": 0.1, "ent_coef": 0.01, "gamma": 0.9,
     "vf_coef": 1.0, "max_grad_norm": 0.05, "clip_vloss": True, "normalize_advantages": False},
    {"lr": 2e-2, "batch_size": 32, "update_epochs": 4, "clip_coef": 0.3, "ent_coef": 0.05, "gamma": 0.95,
     "target_kl": 0.02},
]


def members(spaces_: tuple[dict, dict]) -> list[IPPO]:
    return [IPPO(*spaces_, index=i, seed=i, net_config=NET, learn_step=48, **hp) for i, hp in enumerate(MEMBER_HP)]


def random_rollout(agent: IPPO, seed: int, masked: bool = True) -> MultiAgentRolloutBuffer:
    """A full rollout of random observations acted on by `agent`, with agents dying and coming
    back, truncations and action masks (advantages not yet computed)."""
    rng = np.random.default_rng(seed)
    buffer = agent.create_rollout_buffer(NUM_ENVS)
    flags = {a: life_flags(rng, buffer.num_steps, NUM_ENVS) for a in agent.agent_ids}
    group = agent.solo_group()
    for t in range(buffer.num_steps):
        obs = {a: sample_obs(agent.observation_spaces[a], rng) for a in agent.agent_ids}
        masks = {a: rng.random((NUM_ENVS, 4)) < 0.6 for a in agent.agent_ids
                 if masked and isinstance(agent.action_spaces[a], spaces.Discrete)} or None
        out = IPPO.act_population(group, agent.population_inputs({a: leading(o) for a, o in obs.items()}),
                                  action_masks=None if masks is None else {a: m[None] for a, m in masks.items()})
        extras = out.extras
        buffer.add(obs, {a: extras["action"][a][0] for a in obs}, {a: extras["log_prob"][a][0] for a in obs},
                   {a: extras["value"][a][0] for a in obs}, {a: rng.normal(size=NUM_ENVS) for a in obs},
                   {a: flags[a]["term"][t] for a in obs}, {a: flags[a]["trunc"][t] for a in obs},
                   {a: flags[a]["valid"][t] for a in obs}, action_masks=masks)
    return buffer


def sample_obs(space: spaces.Space, rng: np.random.Generator) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: sample_obs(sub, rng) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, NUM_ENVS)
    return rng.uniform(-1, 1, (NUM_ENVS, *space.shape)).astype(np.float32)


def leading(value: Any) -> Any:
    return {k: leading(v) for k, v in value.items()} if isinstance(value, dict) else np.asarray(value)[None]


def last_values(agent: IPPO, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 100)
    return {a: rng.normal(size=NUM_ENVS) for a in agent.agent_ids}


def adam_states(agent: IPPO) -> list[tuple[float, torch.Tensor, torch.Tensor]]:
    states = []
    for key in agent.agent_groups:
        optimizer = getattr(agent, agent.optimizer_name(key))
        for group in optimizer.param_groups:
            for param in group["params"]:
                state = optimizer.state[param]
                states.append((float(state["step"]), state["exp_avg"], state["exp_avg_sq"]))
    return states


def assert_same_agent(mine: IPPO, theirs: IPPO) -> None:
    """Weights, Adam state, learn counter and RNG state agree."""
    assert mine.learn_counter == theirs.learn_counter
    assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state
    for net in mine.network_names:
        for (name, p), q in zip(getattr(mine, net).named_parameters(), getattr(theirs, net).parameters(), strict=True):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=f"{net}.{name}")
    for (step, avg, avg_sq), (their_step, their_avg, their_avg_sq) in zip(adam_states(mine), adam_states(theirs),
                                                                          strict=True):
        assert step == their_step
        torch.testing.assert_close(avg, their_avg, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(avg_sq, their_avg_sq, atol=1e-8, rtol=1e-3)


def assert_same_stats(mine: dict[str, float] | None, theirs: dict[str, float]) -> None:
    assert mine is not None
    for key, value in theirs.items():
        assert mine[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key


# ---------------------------------------------------------------------- spec
def test_constructor_defaults_are_the_spec_defaults() -> None:
    parameters = inspect.signature(IPPO.__init__).parameters
    for field, default in IPPOSpec.defaults().items():
        assert parameters[field].default == default, field
    agent = IPPO(*DISCRETE)
    assert {name: getattr(agent, name) for name in IPPOSpec.defaults()} == IPPOSpec.defaults()
    assert IPPO.hyperparameter_names == tuple(IPPOSpec.defaults())
    assert IPPOSpec.registered_name() == "IPPO" and IPPOSpec.algorithm_class == "agile_marl.ippo:IPPO"
    assert (IPPOSpec.defaults()["batch_size"], IPPOSpec.defaults()["lr"], IPPOSpec.defaults()["learn_step"]) == \
        (64, 1e-4, 4096)


def test_networks_are_one_actor_and_critic_per_agent_group() -> None:
    agent = IPPO(*DISCRETE, net_config={**NET, "groups": {"speaker": {**NET, "latent_dim": 8}}})
    assert agent.network_names == ["actor_agent", "critic_agent", "actor_speaker", "critic_speaker"]
    assert agent.actor_speaker.latent_dim == 8 and agent.actor_agent.latent_dim == 16
    assert {slot.attr for slot in agent._optimizers} == {"optimizer_agent", "optimizer_speaker"}
    with pytest.raises(ValueError, match="equal spaces"):
        IPPO({"a_0": spaces.Box(-1, 1, (2,)), "a_1": spaces.Box(-1, 1, (3,))},
             {"a_0": spaces.Discrete(2), "a_1": spaces.Discrete(2)})
    with pytest.raises(ValueError, match="batch_size"):
        IPPO(*DISCRETE, batch_size=0)


# ---------------------------------------------------------------------- P = 1: learn is the oracle
SOLO = {"discrete-masked": (DISCRETE, {}), "box": (CONTINUOUS, {"normalize_advantages": False}),
        "dict-multibinary-kl": (DICT_OBS, {"lr": 3e-2, "target_kl": 0.005, "update_epochs": 6, "clip_vloss": True})}


@pytest.mark.parametrize("case", list(SOLO))
def test_learn_equals_the_per_agent_oracle(case: str) -> None:
    spaces_, settings = SOLO[case]
    hp = {"lr": 3e-3, "batch_size": 16, "update_epochs": 3, "ent_coef": 0.01, **settings}
    agent, oracle = (IPPO(*spaces_, seed=3, learn_step=48, net_config=NET, **hp) for _ in range(2))
    torch.manual_seed(0)
    buffer = random_rollout(agent, 0)
    buffer.compute_advantages(last_values(agent, 0), agent.gamma, agent.gae_lambda)
    assert agent.solo_group().stacked  # the Gaussian log-std stacks [P, 1, A] too
    for _ in range(2):  # the second update starts from the Adam state of the first
        expected = ippo_learn(oracle, buffer)
        assert_same_stats(agent.learn(buffer), expected)
        assert_same_agent(agent, oracle)
    if "kl" in case:
        assert expected["scout.early_stop"] == 1.0


# ---------------------------------------------------------------------- P = 3: a group is its members
def widened(agents: list[IPPO]) -> list[IPPO]:
    """Members that differ in widths (padded) and inserted layers (phantoms)."""
    agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(1), hidden_layer=0,
                                          numb_new_nodes=16)
    agents[1].apply_architecture_mutation("encoder.add_layer", np.random.default_rng(3), hidden_layer=0)
    return agents


SCHEDULE = [(True, True, True), (False, True, False), (True, False, True), (True, True, True)]


@pytest.mark.parametrize("case", ["discrete", "discrete-widths", "continuous"])
def test_group_learning_equals_single_agents(case: str) -> None:
    spaces_ = CONTINUOUS if case == "continuous" else DISCRETE
    singles, batched = members(spaces_), members(spaces_)
    if case.endswith("widths"):
        singles, batched = widened(singles), widened(batched)
    torch.manual_seed(0)
    buffers = [random_rollout(agent, seed) for seed, agent in enumerate(singles)]
    torch.manual_seed(0)
    twins = [random_rollout(agent, seed) for seed, agent in enumerate(batched)]  # same rows, own buffers
    for buffer, agent, seed in zip(buffers, singles, range(3), strict=True):
        buffer.compute_advantages(last_values(agent, seed), agent.gamma, agent.gae_lambda)
    compute_advantages_together(twins, [last_values(a, s) for s, a in enumerate(batched)],
                                [a.gamma for a in batched], [a.gae_lambda for a in batched])
    groups = make_member_groups(batched)  # Box policies too: the Gaussian log-std stacks [P, 1, A]
    assert [slots for slots, _ in groups] == [[0, 1, 2]] and groups[0][1].stacked
    first = None
    for active in SCHEDULE:
        expected = [agent.learn(buffer) if on else None for agent, buffer, on in zip(singles, buffers, active,
                                                                                     strict=True)]
        first = first or expected
        stats: list[dict[str, float] | None] = [None] * 3
        for slots, group in groups:
            if not any(active[s] for s in slots):
                continue
            batch = population_batch([twins[s] if active[s] else None for s in slots], batched[0].agent_groups)
            for slot, result in zip(slots, IPPO.learn_population(group, batch, [active[s] for s in slots]),
                                    strict=True):
                stats[slot] = result
        for mine, theirs in zip(stats, expected, strict=True):
            if theirs is None:
                assert mine is None
            else:
                assert_same_stats(mine, theirs)
    assert first is not None and first[0] is not None and first[0]["early_stop"] == 0.0
    assert first[0]["agent.epochs"] == 2 and first[0]["agent.minibatches"] > 2
    stopped = first[2]  # the third member stops early on its KL target
    assert stopped is not None and stopped["early_stop"] > 0.0, stopped
    for mine, theirs in zip(batched, singles, strict=True):
        assert_same_agent(mine, theirs)
    assert [agent.learn_counter for agent in batched] == [3, 3, 3]
    assert all(group.is_current() for _, group in groups)


def test_group_acting_matches_each_member() -> None:
    agents = members(DISCRETE)
    group = MemberGroup(agents)
    rng = np.random.default_rng(0)
    obs = {a: rng.uniform(-1, 1, (3, NUM_ENVS, *space.shape)).astype(np.float32)
           for a, space in DISCRETE[0].items()}
    masks = {"agent_1": rng.random((3, NUM_ENVS, 4)) < 0.5}
    inputs = agents[0].population_inputs(obs)
    greedy = IPPO.act_population(group, inputs, training=False, action_masks=masks)
    for slot, agent in enumerate(agents):
        mine = agent.get_action({a: o[slot] for a, o in obs.items()}, training=False,
                                infos={"action_mask": {"agent_1": masks["agent_1"][slot]}})
        values = agent.get_value({a: o[slot] for a, o in obs.items()})
        for a in obs:
            np.testing.assert_array_equal(greedy.actions[a][slot], mine[a])
            assert greedy.actions[a].dtype == mine[a].dtype == np.int64
            np.testing.assert_allclose(greedy.extras["value"][a][slot].numpy(), values[a], atol=1e-5)
    assert greedy.actions["speaker_0"].shape == (3, NUM_ENVS, 2)
    sampled = IPPO.act_population(group, inputs, training=True, action_masks=masks)
    allowed = masks["agent_1"] | ~masks["agent_1"].any(-1, keepdims=True)
    picked = np.take_along_axis(allowed, sampled.actions["agent_1"][..., None], axis=-1)
    assert picked.all()  # masked actions are never sampled
    for slot, agent in enumerate(agents):  # log-probabilities are those of the sampled actions
        with torch.no_grad():
            actor = agent.actor_agent
            x = torch.as_tensor(obs["agent_1"][slot])
            mask = torch.as_tensor(allowed[slot])
            dist = actor.distribution_from_latent(actor.encode(x)[0], mask)
            expected = dist.log_prob(sampled.extras["action"]["agent_1"][slot])
        np.testing.assert_allclose(sampled.extras["log_prob"]["agent_1"][slot].numpy(), expected.numpy(), atol=1e-5)


def test_box_actions_are_clipped_for_the_env_only() -> None:
    agent = IPPO(*CONTINUOUS, seed=0, net_config=NET, action_std_init=5.0)
    obs = {a: np.zeros((1, 64, 5), np.float32) for a in CONTINUOUS[0]}
    out = IPPO.act_population(agent.solo_group(), agent.population_inputs(obs), training=True)
    raw, env = out.extras["action"]["agent_0"][0].numpy(), out.actions["agent_0"][0]
    assert env.dtype == np.float32 and env.shape == raw.shape == (64, 2)
    assert (env >= BOX.low).all() and (env <= BOX.high).all() and not np.array_equal(raw, env)
    np.testing.assert_allclose(env, np.clip(raw, BOX.low, BOX.high))
    with torch.no_grad():
        dist = agent.actor_agent.distribution_from_latent(agent.actor_agent.encode(torch.zeros(64, 5))[0])
        torch.testing.assert_close(out.extras["log_prob"]["agent_0"][0], dist.log_prob(torch.as_tensor(raw)))


# ---------------------------------------------------------------------- evolution and checkpoints
def test_mutation_clone_and_checkpoint_round_trip(tmp_path) -> None:
    agent = IPPO(*DISCRETE, seed=0, net_config=NET, learn_step=48, batch_size=16)
    buffer = random_rollout(agent, 0)
    buffer.compute_advantages(last_values(agent, 0), agent.gamma, agent.gae_lambda)
    agent.learn(buffer)
    applied = agent.apply_architecture_mutation("encoder.add_layer", np.random.default_rng(0), hidden_layer=0)
    assert set(applied["networks"]) == {"actor_agent", "critic_agent", "actor_speaker", "critic_speaker"}
    agent.set_hyperparameter("lr", 5e-4)
    assert all(g["lr"] == 5e-4 for key in agent.agent_groups for g in getattr(agent, agent.optimizer_name(key)).param_groups)
    agent.learn(buffer)  # the rebuilt optimizers and a new group of one
    clone = agent.clone(index=7)
    assert clone.index == 7 and clone.lineage.parent_id == agent.index
    obs = {a: np.random.default_rng(1).uniform(-1, 1, (NUM_ENVS, *s.shape)).astype(np.float32)
           for a, s in DISCRETE[0].items()}
    expected = agent.get_action(obs, training=False)
    for a, action in clone.get_action(obs, training=False).items():
        np.testing.assert_array_equal(action, expected[a])
    path = agent.save_checkpoint(tmp_path / "ippo")
    loaded = IPPO.load(path)
    assert isinstance(loaded, IPPO) and loaded.lr == 5e-4 and loaded.learn_counter == agent.learn_counter
    assert_same_agent(loaded, agent)
    for a, action in loaded.get_action(obs, training=False).items():
        np.testing.assert_array_equal(action, expected[a])
    loaded.learn(buffer)
    agent.learn(buffer)
    assert_same_agent(loaded, agent)  # Adam moments and the rng survived the round trip
