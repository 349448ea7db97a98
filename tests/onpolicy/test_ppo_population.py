"""PPO is written once, over a leading member axis: a single agent's ``learn`` (``P = 1``) equals a
plain per-agent oracle for every policy kind (discrete, masked, multi-discrete, multi-binary, Box,
recurrent), a group of ``P`` members learns and acts exactly like ``P`` single agents, and
train_on_policy batches the population by default."""

import copy
import os
import signal
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from agile_core.algorithms.group import MemberGroup
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_core.networks.stacked import NotStackableError
from agile_core.training.checkpointing import resume_run
from agile_core.training.interrupt import TrainingInterrupted
from agile_core.training.population import agent_rows, pad_index_batches
from agile_onpolicy import training as training_module
from agile_onpolicy.population import can_batch, make_groups
from agile_onpolicy.ppo import PPO
from agile_onpolicy.rollout import RolloutBuffer, compute_returns_and_advantages_together
from agile_onpolicy.training import train_on_policy
from tests.onpolicy.oracles import evaluate, ppo_learn
from tests.onpolicy.test_ppo import LSTM_NET, collected

torch.set_num_threads(1)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([2.0, 0.5], np.float32))
ACTIONS = {"discrete": spaces.Discrete(3), "multidiscrete": spaces.MultiDiscrete([3, 2]),
           "multibinary": spaces.MultiBinary(3), "box": BOX}
NUM_ENVS = 4
# Every member learns differently; the third stops early on its KL target.
MEMBER_HP = [
    {"lr": 1e-3, "batch_size": 32, "update_epochs": 2, "clip_coef": 0.2, "ent_coef": 0.0, "max_grad_norm": 0.5},
    {"lr": 3e-4, "batch_size": 50, "update_epochs": 3, "clip_coef": 0.1, "ent_coef": 0.01, "vf_coef": 1.0,
     "max_grad_norm": 0.05, "clip_vloss": True, "normalize_advantages": False},
    {"lr": 2e-2, "batch_size": 64, "update_epochs": 4, "clip_coef": 0.3, "ent_coef": 0.05, "target_kl": 0.02},
]


def members(action_space: spaces.Space, share_encoders: bool = True, net: dict | None = None) -> list[PPO]:
    return [PPO(OBS, action_space, index=i, seed=i, net_config=net or NET, learn_step=128,
                share_encoders=share_encoders, **hp) for i, hp in enumerate(MEMBER_HP)]


def random_rollout(agent: PPO, seed: int, masked: bool) -> RolloutBuffer:
    """A full rollout of random observations acted on by `agent` (with episode ends and
    truncations), its advantages computed."""
    rng = np.random.default_rng(seed)
    buffer = agent.create_rollout_buffer(NUM_ENVS)
    for _ in range(buffer.num_steps):
        obs = rng.uniform(-1, 1, (NUM_ENVS, *agent.observation_space.shape)).astype(np.float32)
        mask = None
        if masked:
            mask = agent.prepare_action_mask(rng.random((NUM_ENVS, int(sum(np.atleast_1d(
                getattr(agent.action_space, "nvec", getattr(agent.action_space, "n", 0))))))) < 0.7)
        action, log_prob, _, value = agent.get_action(obs, mask)
        truncated = rng.random(NUM_ENVS) < 0.05
        buffer.add(obs, action, rng.normal(size=NUM_ENVS), rng.random(NUM_ENVS) < 0.05, truncated, value, log_prob,
                   np.ones(NUM_ENVS, dtype=bool), final_value=rng.normal(size=NUM_ENVS), action_mask=mask)
    buffer.compute_returns_and_advantages(rng.normal(size=NUM_ENVS))
    return buffer


def adam_state(agent: PPO) -> list[tuple[float, torch.Tensor, torch.Tensor]]:
    params = [p for group in agent.optimizer.param_groups for p in group["params"]]
    states = [agent.optimizer.state[p] for p in params]
    return [(float(s["step"]), s["exp_avg"], s["exp_avg_sq"]) for s in states]


def assert_same_agent(mine: PPO, theirs: PPO) -> None:
    """Weights, Adam state (step and moments), learn counter and RNG state agree."""
    assert mine.learn_counter == theirs.learn_counter
    assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state
    for net in mine.network_names:
        for (name, p), q in zip(getattr(mine, net).named_parameters(), getattr(theirs, net).parameters(), strict=True):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=f"{net}.{name}")
    for (step, avg, avg_sq), (their_step, their_avg, their_avg_sq) in zip(adam_state(mine), adam_state(theirs),
                                                                          strict=True):
        assert step == their_step
        torch.testing.assert_close(avg, their_avg, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(avg_sq, their_avg_sq, atol=1e-8, rtol=1e-3)


def assert_same_stats(mine: dict[str, float] | None, theirs: dict[str, float]) -> None:
    assert mine is not None and mine.keys() == theirs.keys()
    for key in ("epochs", "minibatches", "early_stop"):
        assert mine[key] == theirs[key], key
    for key, value in theirs.items():
        assert mine[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key


def learn_both_ways(singles: list[PPO], group: MemberGroup, buffers: list[RolloutBuffer],
                    rounds: list[tuple[bool, ...]]) -> list[dict[str, float] | None]:
    """Each round: the active singles learn alone and the group learns at once; their statistics
    agree. Returns the singles' statistics of the first round."""
    first: list[dict[str, float] | None] | None = None
    for active in rounds:
        expected = [agent.learn(buffer) if on else None for agent, buffer, on in zip(singles, buffers, active,
                                                                                     strict=True)]
        first = first or expected
        stats = PPO.learn_population(group, [b if on else None for b, on in zip(buffers, active, strict=True)],
                                     list(active))
        for mine, theirs in zip(stats, expected, strict=True):
            if theirs is None:
                assert mine is None
            else:
                assert_same_stats(mine, theirs)
    assert first is not None
    return first


def widened(agents: list[PPO]) -> list[PPO]:
    """The members made to differ in widths (stacked with padding) and inserted layers (phantoms)."""
    agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(1), hidden_layer=0,
                                          numb_new_nodes=16)
    agents[1].apply_architecture_mutation("encoder.add_layer", np.random.default_rng(3), hidden_layer=0)
    agents[2].apply_architecture_mutation("head.remove_node", np.random.default_rng(2), hidden_layer=0, numb_nodes=8)
    return agents


# ---------------------------------------------------------------------- P = 1: learn is the oracle
SOLO_CASES: dict[str, dict[str, Any]] = {
    "discrete-masked": {"action_space": ACTIONS["discrete"], "masked": True},
    "multidiscrete-masked-separate": {"action_space": ACTIONS["multidiscrete"], "masked": True,
                                      "share_encoders": False, "clip_vloss": True},
    "multibinary-kl-stop": {"action_space": ACTIONS["multibinary"], "lr": 2e-2, "target_kl": 0.01,
                            "update_epochs": 6},
    "box-shared": {"action_space": BOX, "normalize_advantages": False},
    "box-separate": {"action_space": BOX, "share_encoders": False, "clip_vloss": True},
    "recurrent-shared": {"recurrent": True, "max_seq_len": 5, "batch_size": 20},
    "recurrent-separate-overlap": {"recurrent": True, "share_encoders": False, "max_seq_len": 6, "batch_size": 24,
                                   "bptt_sequence_type": "fifty_percent_overlap", "clip_vloss": True},
}


@pytest.mark.parametrize("case", list(SOLO_CASES))
def test_learn_equals_the_per_agent_oracle(case: str) -> None:
    settings = dict(SOLO_CASES[case])
    action_space, masked = settings.pop("action_space", ACTIONS["discrete"]), settings.pop("masked", False)
    recurrent = settings.get("recurrent", False)
    hp = {"lr": 3e-3, "batch_size": 32, "update_epochs": 3, "ent_coef": 0.01, **settings}
    agent, oracle = (PPO(OBS, action_space, seed=3, learn_step=128, net_config=LSTM_NET if recurrent else NET, **hp)
                     for _ in range(2))  # the oracle never joins a group: plain tensors and torch Adam
    torch.manual_seed(0)
    if recurrent:
        buffer = collected(agent, num_envs=NUM_ENVS, num_steps=24, p_end=0.2, horizon=8)[0]
    else:
        buffer = random_rollout(agent, 0, masked)
    assert agent.solo_group().stacked == (not recurrent)
    for _ in range(2):  # the second update starts from the Adam state of the first
        expected = ppo_learn(oracle, buffer)
        assert_same_stats(agent.learn(buffer), expected)
        assert_same_agent(agent, oracle)
    if "kl-stop" in case:
        assert expected["early_stop"] == 1.0 and expected["minibatches"] < 6 * 4
    batch = next(agent._minibatches(buffer))  # evaluate_batch is the oracle's evaluation
    with torch.no_grad():
        for got, want in zip(agent.evaluate_batch(batch), evaluate(agent, batch), strict=True):
            if want is None:
                assert got is None
            else:
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------- P = 3: a group is its members
@pytest.mark.parametrize("widths", [False, True], ids=["same", "widths"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "autograd"])
@pytest.mark.parametrize("share_encoders", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("action_kind", list(ACTIONS))
def test_group_learning_equals_single_agents(action_kind: str, share_encoders: bool, fused: bool,
                                             widths: bool) -> None:
    action_space = ACTIONS[action_kind]
    singles, batched = members(action_space, share_encoders), members(action_space, share_encoders)
    if widths:
        singles, batched = widened(singles), widened(batched)
    torch.manual_seed(0)
    buffers = [random_rollout(agent, seed, masked=action_kind in ("discrete", "multidiscrete"))
               for seed, agent in enumerate(singles)]
    group = MemberGroup(batched, fused=fused)
    assert group.stacked
    # idle members inside, at the start and at the end
    first = learn_both_ways(singles, group, buffers, [(True, True, True), (False, True, False), (True, False, True),
                                                      (True, True, True)])
    stopped = first[2]
    assert stopped is not None and stopped["early_stop"] == 1.0 and 0 < stopped["minibatches"] < 4 * 2
    assert first[0] is not None and first[0]["early_stop"] == 0.0 and first[0]["minibatches"] == 2 * 4
    for mine, theirs in zip(batched, singles, strict=True):
        assert_same_agent(mine, theirs)
    assert [agent.learn_counter for agent in batched] == [3, 3, 3]
    assert group.is_current()


RECURRENT_HP = [  # sequence lengths, counts and rollouts differ, so the group pads L and B
    {"lr": 1e-3, "batch_size": 20, "max_seq_len": 5, "update_epochs": 2},
    {"lr": 3e-3, "batch_size": 24, "max_seq_len": 6, "update_epochs": 3, "clip_vloss": True,
     "bptt_sequence_type": "fifty_percent_overlap", "ent_coef": 0.01},
    {"lr": 2e-2, "batch_size": 16, "max_seq_len": 8, "update_epochs": 4, "target_kl": 0.02,
     "bptt_sequence_type": "maximum"},
]


def recurrent_members(share_encoders: bool, widths: bool = False) -> list[PPO]:
    agents = [PPO(OBS, ACTIONS["discrete"], index=i, seed=i, net_config=LSTM_NET, recurrent=True, learn_step=128,
                  share_encoders=share_encoders, **hp) for i, hp in enumerate(RECURRENT_HP)]
    if widths:  # LSTMs of 16, 24 and 12 units stack padded per gate; a second layer stacks on a phantom
        agents[0].apply_architecture_mutation("encoder.add_layer", np.random.default_rng(0))
        agents[1].apply_architecture_mutation("encoder.add_node", np.random.default_rng(1), numb_new_nodes=8)
        agents[2].apply_architecture_mutation("encoder.remove_node", np.random.default_rng(2), numb_nodes=4)
        with torch.no_grad():  # open the new layer's gate, so it computes something
            agents[0]._lstms()["actor"].stack[1].gate.fill_(0.5)
    return agents


@pytest.mark.parametrize("widths", [False, True], ids=["same", "widths"])
@pytest.mark.parametrize("share_encoders", [True, False], ids=["shared", "separate"])
def test_recurrent_group_learning_equals_single_agents(share_encoders: bool, widths: bool) -> None:
    """LSTM members stack: BPTT over each member's own sequences (padded across members, and
    across LSTM sizes per gate) equals each agent learning alone through nn.LSTM."""
    singles, batched = recurrent_members(share_encoders, widths), recurrent_members(share_encoders, widths)
    if widths:
        assert [agent._lstms()["actor"].hidden_state_size for agent in singles] == [16, 24, 12]
        assert [agent._lstms()["actor"].num_layers for agent in singles] == [2, 1, 1]
    torch.manual_seed(0)
    buffers = [collected(agent, num_envs=NUM_ENVS, num_steps=steps, seed=slot, p_end=0.2, horizon=8)[0]
               for slot, (agent, steps) in enumerate(zip(singles, (24, 20, 12), strict=True))]
    assert not singles[0].solo_group().stacked  # alone, an LSTM runs through nn.LSTM
    group = MemberGroup(batched)
    assert group.stacked
    learn_both_ways(singles, group, buffers, [(True, True, True), (False, True, False), (True, False, True)])
    for mine, theirs in zip(batched, singles, strict=True):
        assert_same_agent(mine, theirs)


def test_recurrent_group_acting_carries_each_members_state() -> None:
    agents = recurrent_members(share_encoders=False, widths=True)
    group = MemberGroup(agents)
    rng = np.random.default_rng(0)
    sizes = [agent._lstms()["actor"].hidden_state_size for agent in agents]
    layers = [agent._lstms()["actor"].num_layers for agent in agents]
    hidden = {name: tuple(torch.stack([nn.functional.pad(torch.randn(depth, NUM_ENVS, size), (0, 24 - size, 0, 0, 0, 2 - depth))
                                       for depth, size in zip(layers, sizes, strict=True)]) for _ in range(2))
              for name in ("actor", "critic")}
    obs = rng.uniform(-1, 1, (3, NUM_ENVS, 5)).astype(np.float32)
    step = PPO.act_population(group, agents[0].population_inputs(obs), None, None, training=False,
                              hidden_state=hidden)
    values = PPO.value_population(group, agents[0].population_inputs(obs), hidden)
    assert step.value is not None and step.hidden is not None
    for slot, agent in enumerate(agents):
        own = {name: (h[slot, :layers[slot], :, :sizes[slot]], c[slot, :layers[slot], :, :sizes[slot]])
               for name, (h, c) in hidden.items()}
        action, log_prob, _, value, new = agent.get_action(obs[slot], hidden_state=own, deterministic=True)
        np.testing.assert_array_equal(agent.env_actions(step.action[slot]), action)
        np.testing.assert_allclose(step.log_prob[slot].numpy(), log_prob, atol=1e-5)
        np.testing.assert_allclose(step.value[slot].numpy(), value, atol=1e-5)
        np.testing.assert_allclose(values[slot].numpy(), agent.get_value(obs[slot], own), atol=1e-5)
        for name in new:
            for mine, theirs in zip(step.hidden[name], new[name], strict=True):
                torch.testing.assert_close(mine[slot, :layers[slot], :, :sizes[slot]], theirs, atol=1e-5, rtol=0)
                assert not mine[slot, ..., sizes[slot]:].any()  # padded units stay exactly zero


def test_idle_members_are_left_untouched() -> None:
    agents = members(ACTIONS["discrete"])
    before = [copy.deepcopy(agent.actor.state_dict()) for agent in agents]
    rng_states = [agent.rng.bit_generator.state for agent in agents]
    buffer = random_rollout(agents[1], 1, masked=False)
    group = MemberGroup(agents)
    stats = PPO.learn_population(group, [None, buffer, None], [False, True, False])
    assert stats[0] is None and stats[2] is None and stats[1] is not None
    for slot in (0, 2):
        assert agents[slot].learn_counter == 0 and agents[slot].rng.bit_generator.state == rng_states[slot]
        for name, value in agents[slot].actor.state_dict().items():
            assert torch.equal(value, before[slot][name])
        assert all(step == 0 and not avg.any() and not avg_sq.any() for step, avg, avg_sq in adam_state(agents[slot])) \
            if agents[slot].optimizer.state else True
    assert agents[1].learn_counter == 1
    assert any(not torch.equal(value, before[1][name]) for name, value in agents[1].actor.state_dict().items())


@pytest.mark.parametrize("action_kind", list(ACTIONS))
def test_group_acting_matches_each_member(action_kind: str) -> None:
    agents = members(ACTIONS[action_kind], share_encoders=action_kind != "discrete")
    group = MemberGroup(agents)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (3 * NUM_ENVS, 5)).astype(np.float32)
    raw_mask = rng.random((3 * NUM_ENVS, 3)) < 0.5 if action_kind == "discrete" else None
    mask = agents[0].prepare_action_mask(raw_mask)
    inputs = agents[0].population_inputs(obs.reshape(3, NUM_ENVS, 5))
    masks = None if mask is None else mask.reshape(3, NUM_ENVS, -1)
    greedy = PPO.act_population(group, inputs, None, masks, training=False)
    values = PPO.value_population(group, inputs)
    assert greedy.value is not None
    for slot, agent in enumerate(agents):
        rows = slice(slot * NUM_ENVS, (slot + 1) * NUM_ENVS)
        their_action, their_log_prob, _, their_value = agent.get_action(
            obs[rows], None if raw_mask is None else raw_mask[rows], deterministic=True)
        action = agent.env_actions(greedy.action[slot])
        assert action.dtype == their_action.dtype and action.shape == their_action.shape
        if np.issubdtype(action.dtype, np.floating):  # a group and a lone member round differently
            np.testing.assert_allclose(action, their_action, atol=1e-6)
        else:
            np.testing.assert_array_equal(action, their_action)
        np.testing.assert_allclose(greedy.log_prob[slot].numpy(), their_log_prob, atol=1e-5)
        np.testing.assert_allclose(greedy.value[slot].numpy(), their_value, atol=1e-5)
        np.testing.assert_allclose(values[slot].numpy(), agent.get_value(obs[rows]), atol=1e-5)
    sampled = PPO.act_population(group, inputs, None, masks)
    assert sampled.action.shape == greedy.action.shape
    if mask is not None:  # masked actions are never sampled (a row allowing none allows all)
        flat = sampled.action.reshape(-1).numpy()
        assert mask.numpy()[np.arange(len(flat)), flat].all()
    for slot, agent in enumerate(agents):  # the log-probabilities are those of the sampled actions
        rows = slice(slot * NUM_ENVS, (slot + 1) * NUM_ENVS)
        with torch.no_grad():
            dist = agent.actor.distribution_from_latent(agent.actor.encode(agent.preprocess(obs[rows]))[0],
                                                        None if mask is None else mask[rows])
            expected = dist.log_prob(sampled.action[slot])
        np.testing.assert_allclose(sampled.log_prob[slot].numpy(), expected.numpy(), atol=1e-5)


def test_box_and_recurrent_agents_act_through_their_own_networks() -> None:
    """A Gaussian policy acts greedily on its mean; a group of one that does not stack (LSTM) acts
    and learns through the same steps."""
    box = PPO(OBS, BOX, net_config=NET, seed=0)
    recurrent = PPO(OBS, ACTIONS["discrete"], net_config=LSTM_NET, recurrent=True, seed=0)
    assert box.solo_group().stacked
    group = recurrent.solo_group()
    assert not group.stacked and group.members == [recurrent]
    obs = np.random.default_rng(0).uniform(-1, 1, (NUM_ENVS, 5)).astype(np.float32)
    action, log_prob, _, value = box.get_action(obs, deterministic=True)
    with torch.no_grad():
        mean = box.actor.head(box.actor.encode(box.preprocess(obs))[0])
    np.testing.assert_allclose(action, mean.numpy(), atol=1e-6)
    assert action.dtype == np.float32 and log_prob.shape == value.shape == (NUM_ENVS,)
    out = recurrent.get_action(obs)
    assert len(out) == 5 and set(out[4]) == {"actor"}


def test_what_cannot_be_stacked_gets_a_group_of_its_own() -> None:
    discrete = ACTIONS["discrete"]
    deeper = {**NET, "encoder_config": {"hidden_size": [16, 16]}}  # widths alone stack, padded
    same, other = members(discrete)[0], members(discrete, net=deeper)[1]
    with pytest.raises(NotStackableError):
        MemberGroup([same, other])
    with pytest.raises(NotStackableError):
        MemberGroup([members(discrete, share_encoders=True)[0], members(discrete, share_encoders=False)[1]])
    boxes = [PPO(OBS, BOX, net_config=NET, seed=i) for i in range(2)]
    assert MemberGroup(boxes).stacked  # the Gaussian log-std stacks [P, 1, A]
    lstm = [PPO(OBS, discrete, net_config=LSTM_NET, recurrent=True, seed=i) for i in range(2)]
    assert MemberGroup(lstm).stacked  # LSTMs of equal sizes stack
    wider = {**LSTM_NET, "encoder_config": {**LSTM_NET["encoder_config"], "hidden_state_size": 24}}
    assert MemberGroup([lstm[0], PPO(OBS, discrete, net_config=wider, recurrent=True, seed=2)]).stacked  # padded
    deeper_lstm = {**LSTM_NET, "encoder_config": {**LSTM_NET["encoder_config"], "num_layers": 2}}
    with pytest.raises(NotStackableError):  # a plain second layer (a residual one stacks on a phantom)
        MemberGroup([lstm[0], PPO(OBS, discrete, net_config=deeper_lstm, recurrent=True, seed=2)])
    groups = make_groups([same, other, members(discrete)[2], *boxes])
    assert [slots for slots, _ in groups] == [[0, 2], [1], [3, 4]]
    assert [group.stacked for _, group in groups] == [True, True, True]
    assert can_batch([same, *boxes])
    assert can_batch([same, *lstm])
    assert not can_batch([same, PPO(spaces.Dict({"x": OBS}), discrete, net_config=NET)])


def test_extend_and_joint_advantages_equal_adding_step_by_step() -> None:
    agents = members(ACTIONS["discrete"])
    torch.manual_seed(0)
    stepwise = [random_rollout(agent, seed, masked=True) for seed, agent in enumerate(agents)]
    for agent, buffer in zip(agents, stepwise, strict=True):
        agent.gamma, agent.gae_lambda = 0.9 + 0.03 * agent.index, 0.8 + 0.05 * agent.index
        buffer.gamma, buffer.gae_lambda = agent.gamma, agent.gae_lambda
    rng = np.random.default_rng(7)
    last_values = [rng.normal(size=NUM_ENVS) for _ in agents]
    last_dones = [(buffer.terminations[-1] | buffer.truncations[-1]).numpy() for buffer in stepwise]
    bulk = []
    for agent, source in zip(agents, stepwise, strict=True):
        buffer = agent.create_rollout_buffer(NUM_ENVS)
        buffer.gamma, buffer.gae_lambda = source.gamma, source.gae_lambda
        n = source.num_steps
        for part in (slice(0, 5), slice(5, n)):  # in two pieces
            buffer.extend(source.observations[part], source.actions[part], source.rewards[part],
                          source.terminations[part], source.truncations[part], source.values[part],
                          source.log_probs[part], source.valid[part], final_value=source.truncation_values[part],
                          action_mask=source.action_masks[part])
        bulk.append(buffer)
    for buffer, last_value, last_done in zip(stepwise, last_values, last_dones, strict=True):
        buffer.compute_returns_and_advantages(last_value, last_done)
    compute_returns_and_advantages_together(bulk, last_values, last_dones)
    for mine, theirs in zip(bulk, stepwise, strict=True):
        for name in ("observations", "actions", "rewards", "values", "log_probs", "terminations", "truncations",
                     "valid", "episode_starts", "truncation_values", "action_masks", "advantages", "returns"):
            assert torch.equal(getattr(mine, name), getattr(theirs, name)), name


def cartpole(num_envs: int = 4) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


@pytest.mark.parametrize("recurrent", [False, True], ids=["feed-forward", "recurrent"])
def test_single_agent_trains_the_same_batched_or_not(recurrent: bool) -> None:
    """One agent: the batched phase takes the same steps, samples and updates as collect_rollouts
    plus PPO.learn (the same torch RNG draws), so the runs agree to float rounding."""
    runs = []
    for batched in (True, False):
        env = cartpole()
        torch.manual_seed(0)
        options: dict[str, Any] = {"recurrent": True, "max_seq_len": 8} if recurrent else {}
        agent = PPO(env.single_observation_space, env.single_action_space, seed=0, learn_step=64,
                    net_config=LSTM_NET if recurrent else NET, batch_size=32, lr=1e-3, **options)
        (agent,), fitness = train_on_policy(env, "CartPole-v1", "PPO", [agent], max_steps=256, evo_steps=128,
                                            verbose=False, seed=1, batch_population=batched)
        runs.append((agent, fitness))
    (batched_agent, batched_fitness), (agent, fitness) = runs
    assert batched_agent.steps == agent.steps == 256 and batched_agent.learn_counter == agent.learn_counter == 4
    assert batched_agent.scores == pytest.approx(agent.scores) and batched_fitness == pytest.approx(fitness)
    for p, q in zip(batched_agent.actor.parameters(), agent.actor.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0)


@pytest.mark.parametrize("recurrent", [False, True], ids=["feed-forward", "recurrent"])
def test_train_on_policy_batches_the_population(monkeypatch: pytest.MonkeyPatch, recurrent: bool) -> None:
    calls = []
    phase = training_module.collect_and_learn_population

    def counting(agents, env, *args, **kwargs):
        calls.append((len(agents), env.num_envs))
        return phase(agents, env, *args, **kwargs)

    monkeypatch.setattr(training_module, "collect_and_learn_population", counting)
    env = cartpole()
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2), batch_size=RLParameter("batch_size", 16, 128, int))
    torch.manual_seed(0)
    options: dict[str, Any] = {"recurrent": True, "max_seq_len": 8} if recurrent else {}
    pop = [PPO(env.single_observation_space, env.single_action_space, index=i, seed=i, hp_config=hp,
               net_config=LSTM_NET if recurrent else NET, learn_step=learn_step, batch_size=32, lr=1e-3, **options)
           for i, learn_step in enumerate([128, 256, 128])]
    pop, fitnesses = train_on_policy(
        env, "CartPole-v1", "PPO", pop, max_steps=1024, evo_steps=512, verbose=False, seed=0,
        selection_strategy=TournamentSelection(2, True, 3, rng=0),
        mutation=Mutations(no_mutation=0.2, architecture=0.3, parameters=0.2, rl_hp=0.3, rand_seed=0))
    assert calls and all(call == (3, 12) for call in calls)
    assert len(pop) == 3 and len(fitnesses) == 3 and all(np.isfinite(fitnesses))
    assert all(agent.fitness and agent.scores for agent in pop)
    originals = [agent for agent in pop if agent.lineage.parent_id is None]
    assert all(agent.steps == 1024 and agent.learn_counter == 1024 // agent.learn_step for agent in originals)


def test_batching_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training_module, "collect_and_learn_population", pytest.fail)
    env = cartpole()
    pop = [PPO(env.single_observation_space, env.single_action_space, index=i, seed=i, net_config=NET,
               learn_step=128) for i in range(2)]
    pop, _ = train_on_policy(env, "CartPole-v1", "PPO", pop, max_steps=256, evo_steps=256, verbose=False,
                             batch_population=False)
    assert all(agent.steps == 256 for agent in pop)


def test_padded_index_batches_and_agent_rows() -> None:
    padded, weights = pad_index_batches([np.array([4, 5, 6]), np.zeros(0, dtype=np.int64), np.array([9])])
    np.testing.assert_array_equal(padded, [[4, 5, 6], [4, 4, 4], [9, 4, 4]])
    np.testing.assert_allclose(weights, [[1 / 3] * 3, [0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(agent_rows([2, 0], 3), [6, 7, 8, 0, 1, 2])


def test_a_second_ctrl_c_in_a_batched_phase_stops_at_whole_rollouts_and_resumes(tmp_path) -> None:
    """The first Ctrl-C waits for the phase's end (here: never); the second stops it early, at a
    whole rollout of every member."""
    env = cartpole()

    def population() -> list[PPO]:
        torch.manual_seed(0)
        return [PPO(env.single_observation_space, env.single_action_space, index=i, seed=i, net_config=NET,
                    learn_step=learn_step, batch_size=64) for i, learn_step in enumerate([256, 512])]

    population()  # the first optimizer import is slow: not inside the timed run
    def press_twice() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(1.0, press_twice)
    timer.start()
    with pytest.raises(TrainingInterrupted) as info:
        train_on_policy(env, "CartPole-v1", "PPO", population(), max_steps=10_000_000, evo_steps=10_000_000,
                        verbose=False, checkpoint_path=str(tmp_path / "ckpt"))
    timer.cancel()
    path = info.value.checkpoint_path
    assert path is not None
    progress = resume_run(path).loop["slot_progress"]
    assert progress[0] > 0 and progress[0] % 64 == 0 and progress[1] % 128 == 0  # whole rollouts only
    pop, fitnesses = train_on_policy(env, "CartPole-v1", "PPO", population(), max_steps=4 * (max(progress) + 256),
                                     evo_steps=10_000_000, verbose=False, resume_from_checkpoint=str(path))
    assert len(fitnesses) == 2 and all(agent.fitness for agent in pop)
