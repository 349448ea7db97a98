"""PPO: spaces, acting, the update (clipping, KL stop), recurrence, cloning, mutation and learning."""

from __future__ import annotations

import time
from typing import Any, cast

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv

from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_onpolicy.collect import CollectState, collect_rollouts
from agile_onpolicy.ppo import PPO, SharedActorCritic
from agile_onpolicy.rollout import RecurrentBatch, RolloutBuffer
from agile_onpolicy.specs import PPOSpec, RecurrentPPOSpec
from tests.seeds import learning_seed

SMALL_NET: dict[str, Any] = {
    "latent_dim": 16, "encoder_config": {"hidden_size": [32]}, "head_config": {"hidden_size": [32]},
}
LSTM_NET: dict[str, Any] = {
    "latent_dim": 16, "encoder_config": {"arch": "lstm", "hidden_state_size": 16},
    "head_config": {"hidden_size": [32]},
}
VECTOR_OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE_OBS = spaces.Box(0, 255, (3, 32, 32), np.uint8)
DICT_OBS = spaces.Dict({"image": IMAGE_OBS, "vector": VECTOR_OBS, "flag": spaces.Discrete(3)})
ACTION_SPACES = {
    "discrete": spaces.Discrete(3, start=1),
    "box": spaces.Box(-0.5, 0.5, (2,), np.float32),
    "multidiscrete": spaces.MultiDiscrete([2, 3], start=[1, -1]),
    "multibinary": spaces.MultiBinary(3),
}


class RandomEnv(gym.Env[Any, Any]):
    """Random observations and rewards; ends with probability `p_end`, truncates at `horizon`.

    Checks that every action it receives lies in its action space.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, horizon: int = 12,
                 p_end: float = 0.1) -> None:
        self.observation_space, self.action_space = observation_space, action_space
        self.horizon, self.p_end, self.t = horizon, p_end, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        self.t += 1
        terminated = bool(self.np_random.random() < self.p_end)
        return (self.observation_space.sample(), float(self.np_random.normal()), terminated,
                self.t >= self.horizon, {})


def random_vec_env(obs_space: spaces.Space, action_space: spaces.Space, num_envs: int = 4,
                   **kwargs: Any) -> SyncVectorEnv:
    """A next-step-autoreset vector env of RandomEnvs."""
    return SyncVectorEnv([lambda: RandomEnv(obs_space, action_space, **kwargs) for _ in range(num_envs)])


def make_agent(obs_space: spaces.Space = VECTOR_OBS, action_space: spaces.Space = ACTION_SPACES["discrete"],
               **kwargs: Any) -> PPO:
    """A small PPO agent (seeded)."""
    recurrent = kwargs.get("recurrent", False)
    defaults: dict[str, Any] = {"net_config": LSTM_NET if recurrent else SMALL_NET, "learn_step": 64,
                                "batch_size": 32, "lr": 3e-3, "seed": 0}
    if isinstance(obs_space, spaces.Dict) or obs_space is IMAGE_OBS:
        defaults["net_config"] = {"latent_dim": 16}
    return PPO(obs_space, action_space, **{**defaults, **kwargs})


def collected(agent: PPO, num_envs: int = 4, num_steps: int = 16, seed: int = 0,
              **env_kwargs: Any) -> tuple[RolloutBuffer, CollectState, SyncVectorEnv]:
    """A buffer holding one rollout of `agent` in a RandomEnv vector env."""
    env = random_vec_env(agent.observation_space, agent.action_space, num_envs, **env_kwargs)
    buffer = agent.create_rollout_buffer(num_envs, num_steps)
    state = collect_rollouts(agent, env, buffer, seed=seed)
    return buffer, state, env


def params(agent: PPO) -> dict[str, torch.Tensor]:
    """Detached copies of every parameter of the agent's networks."""
    return {f"{name}.{p}": t.detach().clone() for name in agent.network_names
            for p, t in getattr(agent, name).named_parameters()}


def full_batch(buffer: RolloutBuffer) -> Any:
    """All valid rows of `buffer` as one flat minibatch (fixed order)."""
    return next(buffer.minibatches(buffer.num_steps * buffer.num_envs, np.random.default_rng(0)))


# ---------------------------------------------------------------------- spaces
@pytest.mark.parametrize("action_kind", list(ACTION_SPACES))
@pytest.mark.parametrize("obs_space", [VECTOR_OBS, IMAGE_OBS, DICT_OBS, spaces.Discrete(5),
                                       spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(4)],
                         ids=["vector", "image", "dict", "discrete", "multidiscrete", "multibinary"])
def test_accepts_spaces_and_action_shapes(obs_space: spaces.Space, action_kind: str) -> None:
    action_space = ACTION_SPACES[action_kind]
    agent = make_agent(obs_space, action_space)
    batched = gym.vector.utils.batch_space(obs_space, 5)
    batched.seed(0)
    action, log_prob, entropy, value = agent.get_action(batched.sample())
    shape = () if action_kind == "discrete" else tuple(action_space.shape or ())
    assert action.shape == (5, *shape)
    assert log_prob.shape == entropy.shape == value.shape == (5,)
    assert np.isfinite(log_prob).all() and np.isfinite(value).all()
    env_action = agent.to_env_action(action)
    assert all(action_space.contains(a) for a in env_action)


@pytest.mark.parametrize("action_space", [spaces.Tuple((spaces.Discrete(2),)), spaces.Text(5),
                                          spaces.Dict({"a": spaces.Discrete(2)})])
def test_rejects_unsupported_action_spaces(action_space: spaces.Space) -> None:
    with pytest.raises(UnsupportedSpaceError, match="PPO does not support action space"):
        PPO(VECTOR_OBS, action_space)


def test_rejects_bad_configurations() -> None:
    with pytest.raises(ValueError, match="1-D MultiDiscrete"):
        PPO(VECTOR_OBS, spaces.MultiDiscrete(np.array([[2, 2], [2, 2]])))
    with pytest.raises(ValueError, match="vector observation spaces only"):
        PPO(IMAGE_OBS, spaces.Discrete(2), recurrent=True)
    with pytest.raises(ValueError, match="clip_coef"):
        PPO(VECTOR_OBS, spaces.Discrete(2), clip_coef=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        PPO(VECTOR_OBS, spaces.Discrete(2), batch_size=0)
    with pytest.raises(ValueError, match="critic_network cannot be given"):
        PPO(VECTOR_OBS, spaces.Discrete(2), critic_network=make_agent(share_encoders=False).critic)


@pytest.mark.parametrize("spec_class", [PPOSpec, RecurrentPPOSpec])
def test_built_from_spec_hyperparameters(spec_class: type[PPOSpec]) -> None:
    spec = spec_class()
    agent = PPO(VECTOR_OBS, spaces.Discrete(2), **spec.hyperparameters())
    assert agent.recurrent == spec.recurrent
    assert all(getattr(agent, name) == getattr(spec, name) for name in PPO.hyperparameter_names)
    numeric = set(spec_class.numeric_hyperparameters())
    assert numeric <= set(PPO.hyperparameter_names), numeric - set(PPO.hyperparameter_names)


def test_networks_and_hyperparameters() -> None:
    shared, separate = make_agent(), make_agent(share_encoders=False)
    assert isinstance(shared.actor, SharedActorCritic) and shared.network_names == ["actor"]
    assert separate.network_names == ["actor", "critic"]
    assert set(PPO.hyperparameter_names) >= {"batch_size", "lr", "learn_step", "gamma", "gae_lambda",
                                             "clip_coef", "ent_coef", "vf_coef", "max_grad_norm",
                                             "target_kl", "update_epochs"}
    assert shared.hyperparameters()["lr"] == 3e-3
    shared.set_hyperparameter("lr", 1e-2)
    assert all(group["lr"] == 1e-2 for group in shared.optimizer.param_groups)
    # adopting pre-built networks clones them
    adopted = make_agent(share_encoders=False, actor_network=separate.actor, critic_network=separate.critic)
    assert adopted.actor is not separate.actor
    assert torch.equal(next(adopted.critic.parameters()), next(separate.critic.parameters()))


def test_box_actions_clipped_for_env_but_scored_unclipped() -> None:
    agent = make_agent(action_space=ACTION_SPACES["box"], action_std_init=2.0)
    obs = np.zeros((256, 4), np.float32)
    action, log_prob, _, _ = agent.get_action(obs)
    assert (np.abs(action) > 0.5).any(), "wide Gaussian samples should leave the bounds"
    env_action = agent.to_env_action(action)
    assert env_action.min() >= -0.5 and env_action.max() <= 0.5
    inside = (np.abs(action) <= 0.5).all(axis=1)
    np.testing.assert_array_equal(env_action[inside], action[inside])
    with torch.no_grad():
        _, expected, _ = agent.actor(agent.preprocess(obs), torch.as_tensor(action))
    np.testing.assert_allclose(log_prob, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_deterministic_actions_and_action_mask() -> None:
    agent = make_agent()
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 4)).astype(np.float32)
    first = agent.get_action(obs, deterministic=True)[0]
    np.testing.assert_array_equal(first, agent.get_action(obs, deterministic=True)[0])
    mask = np.zeros((8, 3), bool)
    mask[:, 2] = True
    for _ in range(5):
        action, log_prob, entropy, _ = agent.get_action(obs, action_mask=mask)
        assert (action == 2).all()
        np.testing.assert_allclose(log_prob, 0.0, atol=1e-6)
        np.testing.assert_allclose(entropy, 0.0, atol=1e-6)


# ---------------------------------------------------------------------- collection
def test_collect_follows_next_step_autoreset_contract() -> None:
    agent = make_agent()
    buffer, state, env = collected(agent, num_steps=40, p_end=0.2, horizon=6)
    n = buffer.size
    done = buffer.terminations[:n] | buffer.truncations[:n]
    # the row after a valid episode end is an autoreset row, and only those are invalid
    expected_invalid = torch.zeros_like(buffer.valid[:n])
    expected_invalid[1:] = done[:-1] & buffer.valid[:n - 1]
    assert torch.equal(~buffer.valid[:n], expected_invalid)
    assert (buffer.rewards[:n][~buffer.valid[:n]] == 0).all()
    assert (buffer.advantages[:n][~buffer.valid[:n]] == 0).all()
    # truncations got V(final observation) as their bootstrap
    truncated = buffer.truncations[:n] & ~buffer.terminations[:n] & buffer.valid[:n]
    assert truncated.any()
    for t, e in truncated.nonzero().tolist():
        if t + 1 < n:
            assert not buffer.valid[t + 1, e]
            torch.testing.assert_close(buffer.truncation_values[t, e], buffer.values[t + 1, e])
    assert agent.steps == state.steps == 40 * 4
    returns, lengths = state.pop_finished()
    assert returns and all(1 <= length <= 6 for length in lengths)
    # the next call starts a new rollout from where the env is
    previous_obs = state.obs
    state = collect_rollouts(agent, env, buffer, state=state)
    np.testing.assert_array_equal(buffer.observations[0].numpy(), previous_obs)


def test_collect_in_two_parts_equals_one_rollout_layout() -> None:
    agent = make_agent()
    env = random_vec_env(VECTOR_OBS, ACTION_SPACES["discrete"])
    buffer = agent.create_rollout_buffer(4, 10)
    state = collect_rollouts(agent, env, buffer, num_steps=4, seed=1)
    assert buffer.size == 4
    state = collect_rollouts(agent, env, buffer, state=state)
    assert buffer.full and state.steps == 40
    with pytest.raises(ValueError, match="num_steps"):
        collect_rollouts(agent, env, buffer, num_steps=11, state=state)


def test_collect_swaps_channels_and_needs_a_vector_env() -> None:
    agent = make_agent(IMAGE_OBS, ACTION_SPACES["discrete"])
    channels_last = spaces.Box(0, 255, (32, 32, 3), np.uint8)
    env = random_vec_env(channels_last, ACTION_SPACES["discrete"], num_envs=2)
    buffer = agent.create_rollout_buffer(2, 4)
    state = collect_rollouts(agent, env, buffer, swap_channels=True, seed=0)
    assert state.obs.shape == (2, 3, 32, 32) and buffer.full
    with pytest.raises(TypeError, match="VectorEnv"):
        collect_rollouts(agent, RandomEnv(VECTOR_OBS, ACTION_SPACES["discrete"]), buffer)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- learning update
@pytest.mark.parametrize("share_encoders", [True, False])
@pytest.mark.parametrize("action_kind", list(ACTION_SPACES))
def test_learn_changes_parameters_and_reduces_loss(action_kind: str, share_encoders: bool) -> None:
    torch.manual_seed(0)
    agent = make_agent(action_space=ACTION_SPACES[action_kind], share_encoders=share_encoders,
                       update_epochs=8, ent_coef=0.0)
    buffer, _, _ = collected(agent)
    batch = full_batch(buffer)
    with torch.no_grad():
        before_loss = agent.compute_losses(batch)
    # freshly collected: the current policy is pi_old, so the ratio is 1 and the KL 0
    assert float(before_loss["approx_kl"]) == pytest.approx(0.0, abs=1e-6)
    before = params(agent)
    stats = agent.learn(buffer)
    assert stats["minibatches"] == 8 * 2 and stats["early_stop"] == 0.0
    assert all(np.isfinite(stats[k]) for k in ("loss", "policy_loss", "value_loss", "entropy"))
    after = params(agent)
    unchanged = [name for name in before if torch.equal(before[name], after[name])]
    assert not unchanged
    with torch.no_grad():
        after_loss = agent.compute_losses(batch)
    assert float(after_loss["loss"]) < float(before_loss["loss"])
    assert float(after_loss["policy_loss"]) < float(before_loss["policy_loss"])


@pytest.mark.parametrize("obs_space", [IMAGE_OBS, DICT_OBS], ids=["image", "dict"])
def test_learn_on_image_and_dict_observations(obs_space: spaces.Space) -> None:
    agent = make_agent(obs_space, ACTION_SPACES["discrete"], update_epochs=1)
    buffer, _, _ = collected(agent, num_envs=2, num_steps=8)
    before = params(agent)
    stats = agent.learn(buffer)
    assert np.isfinite(stats["loss"])
    assert any(not torch.equal(before[k], v) for k, v in params(agent).items() if "encoder" in k)


def test_clipped_objective_ignores_ratios_outside_the_trust_region() -> None:
    agent = make_agent(normalize_advantages=False)
    buffer, _, _ = collected(agent)
    batch = full_batch(buffer)
    # pretend the old policy was much less likely to take these actions: ratio >> 1 + eps
    shifted = type(batch)(**{**batch.__dict__, "old_log_probs": batch.old_log_probs - 5.0,
                             "advantages": torch.ones_like(batch.advantages)})
    losses = agent.compute_losses(shifted)
    assert float(losses["policy_loss"].detach()) == pytest.approx(-(1 + agent.clip_coef), rel=1e-5)
    assert float(losses["clip_fraction"]) == 1.0
    agent.optimizer.zero_grad()
    losses["policy_loss"].backward()
    grads = [p.grad for p in agent.actor.head.parameters() if p.grad is not None]
    assert all(float(g.abs().max()) == 0.0 for g in grads)


def test_target_kl_stops_the_update_early() -> None:
    agent = make_agent(lr=1e-2, update_epochs=10, target_kl=1e-6)
    buffer, _, _ = collected(agent)
    stats = agent.learn(buffer)
    assert stats["early_stop"] == 1.0
    assert 1 <= stats["minibatches"] < 10 * 2
    free = make_agent(lr=1e-2, update_epochs=10)
    buffer, _, _ = collected(free)
    assert free.learn(buffer)["minibatches"] == 10 * 2


def test_value_clipping() -> None:
    agent = make_agent(clip_vloss=True, clip_coef=0.1)
    buffer, _, _ = collected(agent)
    batch = full_batch(buffer)
    plain = make_agent(clip_vloss=False, clip_coef=0.1)
    plain.actor.load_state_dict(agent.actor.state_dict())
    with torch.no_grad():
        # at pi_old the new values equal the old ones: clipping changes nothing
        assert float(agent.compute_losses(batch)["value_loss"]) == pytest.approx(
            float(plain.compute_losses(batch)["value_loss"]), rel=1e-6)
        for network in (agent.actor, plain.actor):
            assert isinstance(network, SharedActorCritic)
            cast(torch.Tensor, network.value_head.output_layer.bias).add_(3.0)
        value = agent.evaluate_batch(batch)[2]
        clipped = batch.old_values + (value - batch.old_values).clamp(-0.1, 0.1)
        expected = 0.5 * torch.max((value - batch.returns) ** 2, (clipped - batch.returns) ** 2).mean()
        got = agent.compute_losses(batch)["value_loss"]
        torch.testing.assert_close(got, expected)
        assert float(got) >= float(plain.compute_losses(batch)["value_loss"])


# ---------------------------------------------------------------------- recurrence
@pytest.mark.parametrize("share_encoders", [True, False])
def test_recurrent_state_reset_at_episode_starts(share_encoders: bool) -> None:
    agent = make_agent(recurrent=True, share_encoders=share_encoders)
    buffer, state, _ = collected(agent, num_steps=30, p_end=0.2, horizon=8)
    n = buffer.size
    starts = buffer.episode_starts[:n]
    assert starts[0].all()
    # an episode starts exactly on the row after an autoreset row
    assert torch.equal(starts[1:], ~buffer.valid[: n - 1])
    for leaf in (t for pair in buffer.hidden_states.values() for t in pair):
        assert (leaf[:n][starts] == 0).all(), "the state fed at an episode start must be zero"
        assert (leaf[:n][~starts].abs().sum(dim=(-1, -2)) > 0).all()
    # zeroing the state gives the same output as an initial (zero) state
    obs = np.zeros((4, 4), np.float32)
    hidden = state.hidden
    assert hidden is not None
    reset = np.array([True, False, True, False])
    masked = agent.mask_hidden(hidden, reset)
    fresh = agent.get_action(obs, hidden_state=agent.initial_hidden(4), deterministic=True)
    out = agent.get_action(obs, hidden_state=masked, deterministic=True)
    np.testing.assert_allclose(out[3][reset], fresh[3][reset], atol=1e-6)


@pytest.mark.parametrize(("sequence_type", "max_seq_len"),
                         [("chunked", 5), ("fifty_percent_overlap", 6), ("maximum", None), ("chunked", None)])
@pytest.mark.parametrize("share_encoders", [True, False])
def test_bptt_replays_the_collected_policy(sequence_type: str, max_seq_len: int | None,
                                           share_encoders: bool) -> None:
    agent = make_agent(recurrent=True, share_encoders=share_encoders, bptt_sequence_type=sequence_type,
                       max_seq_len=max_seq_len, batch_size=20)
    buffer, _, _ = collected(agent, num_steps=24, p_end=0.2, horizon=8)
    seen = 0
    for batch in agent._minibatches(buffer):
        assert isinstance(batch, RecurrentBatch)
        with torch.no_grad():
            log_prob, _, value, mask = agent.evaluate_batch(batch)
        assert mask is not None
        torch.testing.assert_close(log_prob[mask], batch.old_log_probs[mask], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(value[mask], batch.old_values[mask], atol=1e-5, rtol=1e-5)
        seen += int(mask.sum())
    assert seen == buffer.num_valid
    stats = agent.learn(buffer)
    assert np.isfinite(stats["loss"]) and stats["approx_kl"] >= 0


def test_recurrent_test_and_feedforward_test_append_fitness() -> None:
    for recurrent in (False, True):
        agent = make_agent(recurrent=recurrent)
        env = random_vec_env(VECTOR_OBS, ACTION_SPACES["discrete"], num_envs=2)
        score = agent.test(env, loop=2, max_steps=20)
        assert agent.fitness == [score] and np.isfinite(score)


# ---------------------------------------------------------------------- cloning and mutation
def test_clone_is_independent() -> None:
    agent = make_agent(share_encoders=False)
    buffer, _, _ = collected(agent)
    twin = agent.clone(index=7)
    assert twin.index == 7 and twin.lineage.parent_id == agent.index
    before = params(agent)
    twin.learn(buffer)
    assert all(torch.equal(before[k], v) for k, v in params(agent).items())
    assert any(not torch.equal(before[k], v) for k, v in params(twin).items())
    twin_params = {id(p) for group in twin.optimizer.param_groups for p in group["params"]}
    assert twin_params == {id(p) for name in twin.network_names for p in getattr(twin, name).parameters()}
    twin.apply_architecture_mutation("encoder.add_node", np.random.default_rng(0))
    assert agent.actor.encoder.config != twin.actor.encoder.config
    assert twin.rng is not agent.rng


def assert_consistent(agent: PPO) -> None:
    """Actor and critic read encoders of the same architecture, and the optimizer trains exactly
    the current parameters with the agent's learning rate."""
    if not agent.share_encoders:
        assert agent.actor.encoder.config == agent.critic.encoder.config
        assert agent.actor.latent_dim == agent.critic.latent_dim
        assert agent.actor.head.config["hidden_size"] == agent.critic.head.config["hidden_size"]
    else:
        assert isinstance(agent.actor, SharedActorCritic)
        assert agent.actor.value_head.num_inputs == agent.actor.latent_dim == agent.actor.head.num_inputs
    trained = {id(p) for group in agent.optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for name in agent.network_names for p in getattr(agent, name).parameters()}
    assert all(group["lr"] == agent.lr for group in agent.optimizer.param_groups)


@pytest.mark.parametrize("share_encoders", [True, False])
@pytest.mark.parametrize("recurrent", [False, True])
def test_mutation_in_the_middle_of_a_rollout(recurrent: bool, share_encoders: bool) -> None:
    agent = make_agent(recurrent=recurrent, share_encoders=share_encoders, max_seq_len=6, batch_size=24)
    env = random_vec_env(VECTOR_OBS, ACTION_SPACES["discrete"], p_end=0.1, horizon=10)
    buffer = agent.create_rollout_buffer(4, 16)
    state = collect_rollouts(agent, env, buffer, num_steps=8, seed=3)

    # architecture (the encoder grows: for an LSTM, its hidden state) and learning rate
    applied = agent.apply_architecture_mutation("encoder.add_node", np.random.default_rng(1),
                                                **({"numb_new_nodes": 8} if recurrent else {}))
    expected_networks = ["actor"] if share_encoders else ["actor", "critic"]
    assert applied["networks"] == expected_networks
    agent.set_hyperparameter("lr", 5e-3)
    assert_consistent(agent)

    state = collect_rollouts(agent, env, buffer, state=state)
    assert buffer.full
    if recurrent:
        size = 16 + 8
        assert agent.hidden_state_shapes(4)["actor"][0] == (1, 4, size)
        assert state.hidden is not None
        assert all(t.shape == (1, 4, size) for pair in state.hidden.values() for t in pair)
        assert buffer.episode_starts[8].all(), "the state was reset (an episode start) after the change"
        for pair in buffer.hidden_states.values():
            for leaf in pair:
                assert leaf.shape == (16, 4, 1, size)
                assert (leaf[8] == 0).all()
        # growth is function-preserving with zero-padded states: BPTT replays every row exactly
        for batch in agent._minibatches(buffer):
            with torch.no_grad():
                log_prob, _, _, mask = agent.evaluate_batch(batch)
            torch.testing.assert_close(log_prob[mask], batch.old_log_probs[mask], atol=1e-5, rtol=1e-5)

    before = params(agent)
    stats = agent.learn(buffer)
    assert np.isfinite(stats["loss"])
    after = params(agent)
    assert not [name for name in before if torch.equal(before[name], after[name])]
    assert_consistent(agent)

    # and it keeps learning: random mutations between further rollouts
    rng = np.random.default_rng(2)
    for _ in range(3):
        agent.mutate_architecture(rng, new_layer_prob=0.5)
        assert_consistent(agent)
        state = collect_rollouts(agent, env, buffer, state=state)
        assert np.isfinite(agent.learn(buffer)["loss"])


def test_collect_resets_state_of_another_agent() -> None:
    agent = make_agent(recurrent=True)
    buffer, state, env = collected(agent, num_steps=4)
    other = agent.clone(index=1)
    collect_rollouts(other, env, buffer, state=state)
    assert buffer.episode_starts[0].all() and state.hidden_owner == id(other)


# ---------------------------------------------------------------------- learning
@pytest.mark.learning
def test_ppo_learns_cartpole() -> None:
    """A single PPO agent reaches a mean greedy return >= 200 on CartPole-v1 within 60k steps."""
    seed = learning_seed()
    torch.manual_seed(seed)
    env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="vector_entry_point")
    eval_env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="vector_entry_point")
    agent = PPO(env.single_observation_space, env.single_action_space, learn_step=1024, batch_size=128,
                lr=1e-3, update_epochs=4, ent_coef=0.0, seed=seed)
    buffer = agent.create_rollout_buffer(env.num_envs)
    untrained = agent.test(eval_env, max_steps=500)
    assert untrained < 100
    state, scores, start = None, [], time.monotonic()
    while agent.steps < 60_000:
        state = collect_rollouts(agent, env, buffer, state=state, seed=seed)
        agent.learn(buffer)
        if agent.steps % 4096 < 1024:
            scores.append(agent.test(eval_env, max_steps=500))
            if scores[-1] >= 200:
                break
    elapsed = time.monotonic() - start
    print(f"CartPole: greedy {untrained} untrained, {scores} after {agent.steps} steps in {elapsed:.1f}s")
    assert max(scores) >= 200, scores
    assert elapsed < 120
