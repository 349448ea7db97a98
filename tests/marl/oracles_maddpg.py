"""A plain per-agent reference of the MADDPG/MATD3 learning step: one member's own networks and
``torch.optim.Adam`` optimizers, a loop over its agents. The population-shaped step
(``learn_population``) is tested against it; it lives only here."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agile_core.networks import preprocess_observation
from agile_marl.buffers import MultiAgentBatch
from agile_marl.maddpg import MADDPG
from agile_marl.matd3 import MATD3


def _net(agent: MADDPG, role: str, agent_id: str) -> Any:
    return getattr(agent, f"{role}_{agent_id}")


def _critic_action(agent: MADDPG, agent_id: str, action: Any) -> torch.Tensor:
    space = agent.action_spaces[agent_id]
    action = torch.as_tensor(action)
    if isinstance(space, spaces.Discrete):
        return F.one_hot(action.reshape(-1).long() - int(space.start), int(space.n)).float()
    low = torch.as_tensor(space.low, dtype=torch.float32).reshape(-1)
    high = torch.as_tensor(space.high, dtype=torch.float32).reshape(-1)
    return (action.float().reshape(action.shape[0], -1) - (high + low) / 2) / ((high - low) / 2)


def maddpg_learn(agent: MADDPG, batch: MultiAgentBatch) -> dict[str, float]:
    """One MADDPG (or MATD3) step of `agent` on a flat batch ``[B, ...]``."""
    ids = agent.agent_ids
    rows = int(batch.weights.shape[0])

    def inputs(x: Any) -> dict[str, Any]:
        return {a: preprocess_observation(agent.observation_spaces[a], x[a], None, agent.normalize_images) for a in ids}

    def joint(x: dict[str, Any]) -> Any:
        if isinstance(agent.joint_observation_space, spaces.Box):
            return torch.cat([x[a] for a in ids], dim=-1)
        flat = {}
        for a in ids:
            flat.update({f"{a}.{k}": v for k, v in x[a].items()} if isinstance(x[a], dict) else {a: x[a]})
        return flat

    obs, next_obs = inputs(batch.obs), inputs(batch.next_obs)
    x, x_next = joint(obs), joint(next_obs)
    taken = {a: _critic_action(agent, a, batch.action[a]) for a in ids}
    with torch.no_grad():
        next_actions = {}
        for a in ids:
            out = _net(agent, "actor_target", a)(next_obs[a])
            space = agent.action_spaces[a]
            if isinstance(space, spaces.Discrete):
                next_actions[a] = F.one_hot(out.argmax(-1), int(space.n)).float()
                continue
            low = torch.as_tensor(space.low, dtype=torch.float32).reshape(-1)
            high = torch.as_tensor(space.high, dtype=torch.float32).reshape(-1)
            action = (out.reshape(rows, -1) - (high + low) / 2) / ((high - low) / 2)
            if isinstance(agent, MATD3):
                noise = np.clip(agent.rng.normal(0.0, agent.policy_noise, size=tuple(action.shape)),
                                -agent.noise_clip, agent.noise_clip)
                action = (action + torch.as_tensor(noise, dtype=torch.float32)).clamp(-1.0, 1.0)
            next_actions[a] = action
        a_next = torch.cat([next_actions[a] for a in ids], dim=-1)
    a_taken = torch.cat([taken[a] for a in ids], dim=-1)
    critic_total = 0.0
    for a in ids:
        mask = torch.as_tensor(batch.mask[a]).float().reshape(-1, 1)
        reward = torch.as_tensor(batch.reward[a]).float().reshape(-1, 1)
        done = torch.as_tensor(batch.done[a]).float().reshape(-1, 1)
        with torch.no_grad():
            bootstrap = torch.stack([_net(agent, f"{role}_target", a)(x_next, a_next) for role in agent.critic_names])
            target = reward + agent.gamma * (1.0 - done) * bootstrap.amin(dim=0)
        loss = sum((((_net(agent, role, a)(x, a_taken) - target) ** 2) * mask).sum() / rows
                   for role in agent.critic_names)
        optimizer = _net(agent, "critic_optimizer", a)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        critic_total += float(loss.detach())  # type: ignore[union-attr]
    losses = {"critic": critic_total}
    agent.learn_counter += 1
    if agent.learn_counter % agent.policy_freq:
        return losses
    actor_total = 0.0
    for a in ids:
        out = _net(agent, "actor", a)(obs[a])
        space = agent.action_spaces[a]
        if isinstance(space, spaces.Discrete):
            gumbel = torch.as_tensor(agent.rng.gumbel(size=tuple(out.shape)), dtype=torch.float32)
            soft = torch.softmax((out + gumbel) / agent.gumbel_temperature, dim=-1)
            own = F.one_hot(soft.argmax(-1), int(space.n)).float() - soft.detach() + soft
        else:
            low = torch.as_tensor(space.low, dtype=torch.float32).reshape(-1)
            high = torch.as_tensor(space.high, dtype=torch.float32).reshape(-1)
            own = (out.reshape(rows, -1) - (high + low) / 2) / ((high - low) / 2)
        joint_action = torch.cat([own if b == a else taken[b] for b in ids], dim=-1)
        critic = _net(agent, agent.critic_names[0], a)
        critic.requires_grad_(False)
        mask = torch.as_tensor(batch.mask[a]).float().reshape(-1, 1)
        loss = -(critic(x, joint_action) * mask).sum() / rows
        optimizer = _net(agent, "actor_optimizer", a)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        critic.requires_grad_(True)
        actor_total += float(loss.detach())
    losses["actor"] = actor_total
    with torch.no_grad():
        for a in ids:
            for role in ("actor", *agent.critic_names):
                for param, target_param in zip(_net(agent, role, a).parameters(),
                                               _net(agent, f"{role}_target", a).parameters(), strict=True):
                    target_param.lerp_(param, agent.tau)
    return losses


# ---------------------------------------------------------------------------- shared test fixtures
OBS = {"speaker_0": spaces.Box(-1.0, 1.0, (3,), np.float32), "listener_0": spaces.Box(-1.0, 1.0, (5,), np.float32)}
LISTENER_BOX = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))  # asymmetric bounds
ACTIONS = {
    "continuous": {"speaker_0": spaces.Box(0.0, 1.0, (3,), np.float32), "listener_0": LISTENER_BOX},
    "discrete": {"speaker_0": spaces.Discrete(3), "listener_0": spaces.Discrete(4, start=1)},
    "mixed": {"speaker_0": spaces.Discrete(3), "listener_0": LISTENER_BOX},
}
DICT_OBS = {"speaker_0": spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "goal": spaces.Discrete(3)}),
            "listener_0": spaces.Box(-1.0, 1.0, (5,), np.float32)}
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [24]}, "head_config": {"hidden_size": [16]}}
SETTINGS = [dict(batch_size=16, lr_actor=1e-3, lr_critic=2e-3, gamma=0.95, tau=1e-2),
            dict(batch_size=24, lr_actor=3e-4, lr_critic=1e-3, gamma=0.9, tau=5e-3),
            dict(batch_size=8, lr_actor=2e-3, lr_critic=5e-4, gamma=0.99, tau=1.0)]
MATD3_EXTRA = [dict(policy_freq=1, policy_noise=0.2, noise_clip=0.5), dict(policy_freq=2, policy_noise=0.1, noise_clip=0.15),
               dict(policy_freq=3, policy_noise=0.3, noise_clip=0.4)]


def random_obs(space: spaces.Space, rows: int, rng: np.random.Generator) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: random_obs(sub, rows, rng) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return rng.integers(int(space.start), int(space.start) + int(space.n), rows)
    return rng.uniform(-1.0, 1.0, (rows, *space.shape)).astype(np.float32)


def random_actions(space: spaces.Space, rows: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return rng.integers(int(space.start), int(space.start) + int(space.n), rows)
    return rng.uniform(space.low, space.high, (rows, *space.shape)).astype(np.float32)


def filled_memory(obs_spaces: dict[str, spaces.Space], action_spaces: dict[str, spaces.Space], steps: int = 60,
                  rows: int = 4) -> Any:
    """A replay memory of random joint transitions (some agents dead, some terminated)."""
    from agile_marl.buffers import MultiAgentReplayBuffer

    memory = MultiAgentReplayBuffer(400, obs_spaces, action_spaces)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        memory.add({a: random_obs(s, rows, rng) for a, s in obs_spaces.items()},
                   {a: random_actions(s, rows, rng) for a, s in action_spaces.items()},
                   {a: rng.normal(size=rows).astype(np.float32) for a in obs_spaces},
                   {a: random_obs(s, rows, rng) for a, s in obs_spaces.items()},
                   {a: rng.random(rows) < 0.2 for a in obs_spaces},
                   {a: rng.random(rows) < 0.8 for a in obs_spaces})
    return memory


def build(case: str, widths: bool = False, obs_spaces: dict[str, spaces.Space] | None = None) -> list[MADDPG]:
    """Three members with different hyperparameters (MADDPG for "continuous"/"discrete", MATD3 for "matd3")."""
    cls = MATD3 if case == "matd3" else MADDPG
    actions = ACTIONS["mixed" if case == "matd3" else case]
    agents: list[MADDPG] = []
    for index, hp in enumerate(SETTINGS):
        extra = MATD3_EXTRA[index] if cls is MATD3 else {}
        agents.append(cls(obs_spaces or OBS, actions, net_config=NET, seed=index, O_U_noise=index != 1,
                          vect_noise_dim=2, **hp, **extra))
    if widths:  # different hidden widths and an inserted layer: the group pads them
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(4), hidden_layer=0,
                                              numb_new_nodes=8)
        agents[2].apply_architecture_mutation("head.add_layer", np.random.default_rng(8), hidden_layer=0)
        for network in (getattr(agents[2], name) for name in agents[2].network_names):
            for block in network.head.layers:
                if block.residual:
                    with torch.no_grad():
                        block.gate.fill_(0.5)
    return agents


def assert_same(mine: MADDPG, theirs: MADDPG) -> None:
    """Same weights of every network, Adam states, learn counter, RNG and noise state."""
    assert mine.learn_counter == theirs.learn_counter
    for name in mine.network_names:
        for (key, a), b in zip(getattr(mine, name).named_parameters(), getattr(theirs, name).parameters(), strict=True):
            assert a.shape == b.shape
            assert torch.allclose(a, b, atol=1e-5), f"{name}.{key}: {(a - b).abs().max()}"
    for slot in mine._optimizers:
        state_a, state_b = (getattr(agent, slot.attr).state_dict()["state"] for agent in (mine, theirs))
        assert state_a.keys() == state_b.keys()
        for key in state_b:
            assert float(state_a[key]["step"]) == float(state_b[key]["step"])
            for moment in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(state_a[key][moment], state_b[key][moment], atol=1e-5, rtol=1e-4), moment
    assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state
    for agent_id, noise in theirs.exploration.items():
        np.testing.assert_allclose(getattr(mine.exploration[agent_id], "state", 0.0), getattr(noise, "state", 0.0))
