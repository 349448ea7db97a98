"""Proximal Policy Optimization (Schulman et al., 2017).

PPO alternates between two phases:

1. **Collect** a rollout of ``learn_step`` environment steps with the current stochastic policy
   ``pi_old``, storing for every step the observation ``s_t``, the sampled action ``a_t``, its
   log-probability ``log pi_old(a_t | s_t)`` and the critic's value ``V_old(s_t)``
   (:func:`agile_onpolicy.collect.collect_rollouts`). The rollout buffer then estimates
   advantages ``A_t`` with GAE(gamma, lambda) and returns ``R_t = A_t + V_old(s_t)``.

2. **Learn**: for ``update_epochs`` passes over the rollout, in shuffled minibatches of
   ``batch_size`` rows, minimise

       L = L_clip + vf_coef * L_value - ent_coef * H

   where, with the probability ratio ``r_t = pi(a_t | s_t) / pi_old(a_t | s_t)``,

   * ``L_clip = -E[min(r_t A_t, clip(r_t, 1 - clip_coef, 1 + clip_coef) A_t)]`` is the clipped
     surrogate objective: the policy gains nothing from moving the ratio outside the trust
     region ``[1 - eps, 1 + eps]`` in the direction the advantage favours;
   * ``L_value = 0.5 E[(V(s_t) - R_t)^2]``; with ``clip_vloss`` the new value may move at most
     ``clip_coef`` from ``V_old`` before the loss stops rewarding it (the larger of the clipped
     and unclipped errors is used);
   * ``H`` is the policy entropy, a bonus that keeps the policy exploring.

   Gradients are clipped to a global norm of ``max_grad_norm``. When ``target_kl`` is set, the
   update stops as soon as the approximate KL divergence ``E[(r - 1) - log r]`` between the
   old and the current policy exceeds it on a minibatch (that minibatch is not applied).

Networks
--------
The policy is a :class:`~agile_core.networks.StochasticActor`: categorical (Discrete),
independent categoricals (MultiDiscrete), Bernoulli (MultiBinary) or a diagonal Gaussian with a
learnt state-independent log-std initialised to ``log(action_std_init)`` (Box).

* ``share_encoders=True``: actor and critic are *one* network, :class:`SharedActorCritic`,
  whose encoder feeds both the policy head and a value head. An architecture mutation of the
  encoder or of the latent size therefore changes what both heads read in one go, and the
  critic can never disagree with the actor about the encoder.
* ``share_encoders=False``: a separate :class:`~agile_core.networks.ValueNetwork` with its own
  encoder of the same architecture; it is registered as a follower of the actor, so every
  architecture mutation sampled on the actor is replayed on it with the same parameters.

Continuous actions
------------------
A Gaussian sample is stored and scored *unclipped*: ``log_prob`` is the density of the raw
sample, and the raw sample is what the buffer keeps and what ``learn`` re-evaluates, so the
ratio ``r_t`` compares like with like. Only the copy sent to the environment is clipped to the
Box bounds (:meth:`PPO.to_env_action`); the environment cannot tell the difference between a
sample beyond a bound and the bound itself.

Recurrent policies
------------------
With ``recurrent=True`` the encoders are LSTMs. The recurrent state is a dict
``{"actor": (h, c)}`` (plus ``"critic": (h, c)`` with separate encoders), each tensor
``[num_layers, num_envs, hidden_state_size]``. It is carried from step to step, zeroed where an
episode begins, and stored in the buffer at every step; ``learn`` replays each BPTT sequence
from its stored initial state, zeroing it again before every step flagged as an episode start.
The population-shaped steps take and give the state with a leading member axis,
``[P, num_layers, rows, H]``; members with LSTMs of different sizes stack padded to the widest
and deepest (a member's padded units stay zero, its missing top layers are identities), and
:meth:`PPO.member_hidden` cuts the state back to each member.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.group import MemberGroup, with_member_axis
from agile_core.algorithms.ppo_losses import (
    LOSS_NAMES,
    ppo_minibatch_losses,
    prepare_action_mask,
    to_env_action,
)
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import (
    EvolvableLSTM,
    EvolvableMLP,
    EvolvableModule,
    EvolvableNetwork,
    StochasticActor,
    ValueNetwork,
    as_network_spec,
    build_encoder,
    preprocess_observation,
)
from agile_core.networks.network import build_head
from agile_core.specs.network import NetworkSpec
from agile_core.training.budget import rollout_vector_steps
from agile_core.training.evaluation import evaluate_policy
from agile_core.training.population import pad_index_batches
from agile_onpolicy.rollout import RecurrentBatch, RolloutBatch, RolloutBuffer
from agile_onpolicy.rollout.storage import map_tree
from agile_onpolicy.specs import PPOSpec

HiddenStates = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Recurrent state of a PPO agent: ``{"actor": (h, c)[, "critic": (h, c)]}``, each tensor
``[num_layers, num_envs, hidden_state_size]``."""

Batch = RolloutBatch | RecurrentBatch



_DEFAULTS = PPOSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""

class SharedActorCritic(StochasticActor):
    """A :class:`StochasticActor` with a value head on the same encoder latent.

    ``forward`` behaves as the actor's; :meth:`value` gives ``V(obs)`` ``[...]`` (plus the new
    hidden state when recurrent). The value head is an ordinary head, so latent-size mutations
    remap it together with the policy head and ``"value_head.<m>"`` mutations change it alone.
    """

    head_names: ClassVar[tuple[str, ...]] = ("head", "value_head")
    value_head: EvolvableMLP

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 net_spec: NetworkSpec | Mapping[str, Any] | None = None, *, action_std_init: float = 0.6,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        EvolvableNetwork.__init__(self)
        spec = as_network_spec(net_spec)
        extra = self._describe(action_space, action_std_init)
        encoder = build_encoder(observation_space, spec, recurrent)
        heads = {
            "head": build_head(spec, spec.latent_dim, self._head_outputs(extra)),
            "value_head": build_head(spec, spec.latent_dim, 1),
        }
        self._assemble_from_spec(encoder, heads, spec)
        self._setup(**extra)
        self._place(device, dtype)

    def value(self, obs: Any, hidden_state: Any = None) -> Any:
        """State values ``[...]`` (plus the new hidden state when recurrent)."""
        latent, hidden = self.encode(obs, hidden_state)
        return self._with_hidden(self.value_head(latent).squeeze(-1), hidden)


def _fit_state(tensor: torch.Tensor, num_layers: int, size: int) -> torch.Tensor:
    """Pad with zeros or cut an LSTM state ``[layers, B, H]`` to ``[num_layers, B, size]``."""
    if tensor.shape[0] == num_layers and tensor.shape[2] == size:
        return tensor
    out = tensor.new_zeros((num_layers, tensor.shape[1], size))
    layers, width = min(num_layers, tensor.shape[0]), min(size, tensor.shape[2])
    out[:layers, :, :width] = tensor[:layers, :, :width]
    return out


@dataclass
class PPOMinibatch:
    """Minibatches of a group's members laid out ``[P, rows, ...]`` (see :meth:`PPO.learn_population`).

    ``mask[p]`` is 1 on member ``p``'s own rows and 0 on padding (recurrent: its loss mask) and
    ``counts[p]`` their number (at least 1), so a masked row sum over the count is the member's
    mean. Recurrent minibatches hold BPTT sequences: ``obs`` is time-major ``[P, L, B, ...]``, the
    rows of the other fields are its ``L x B`` steps, ``starts`` ``[P, L, B]`` flags the steps
    where an episode begins and ``initial_hidden`` is each sequence's stored initial state
    ``[P, layers, B, H]`` (sequences and steps zero-padded to the longest member's)."""

    obs: Any
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor
    counts: torch.Tensor
    action_masks: torch.Tensor | None = None
    starts: torch.Tensor | None = None
    initial_hidden: HiddenStates | None = None


class PolicyStep(NamedTuple):
    """What :meth:`PPO.act_population` gives for inputs ``[P, rows, ...]``: raw actions
    ``[P, rows, ...]``, their log-probabilities and the values ``[P, rows]`` (None when not asked
    for), the new recurrent state (``[P, layers, rows, H]`` leaves; None unless recurrent) and the
    action distribution."""

    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor | None
    hidden: HiddenStates | None
    distribution: Any


def _member_axis(hidden: HiddenStates | None, add: bool) -> HiddenStates | None:
    """A recurrent state with a leading member axis of 1 added (`add`) or removed."""
    if hidden is None:
        return None
    return map_tree(lambda leaf: leaf.unsqueeze(0) if add else leaf.squeeze(0), hidden)


def _padded(leaf: torch.Tensor, shape: Sequence[int], fill: float | bool = 0) -> torch.Tensor:
    """`leaf` in the leading corner of a tensor of `shape` filled with `fill` (`leaf` itself when it fits)."""
    if tuple(leaf.shape) == tuple(shape):
        return leaf
    out = leaf.new_full(tuple(shape), fill)
    out[tuple(slice(0, size) for size in leaf.shape)] = leaf
    return out


def sequence_minibatch(members: Sequence[PPO], batches: Sequence[RecurrentBatch | None]) -> PPOMinibatch:
    """The members' BPTT minibatches (None for a member that sits out) as one
    :class:`PPOMinibatch`: sequences and steps padded to the longest member's ``L x B`` (padding
    weighs nothing: it is outside every loss mask and starts from a zero state)."""
    present = [batch for batch in batches if batch is not None]
    length = max(batch.old_log_probs.shape[0] for batch in present)
    width = max(batch.old_log_probs.shape[1] for batch in present)
    like = present[0]  # recurrent policies read vector observations: every field is one tensor

    def stacked(get: Any, fill: float | bool = 0) -> torch.Tensor:
        parts = [None if batch is None else get(member, batch) for member, batch in zip(members, batches, strict=True)]
        model = next(part for part in parts if part is not None)
        shape = (length, width, *model.shape[2:])
        return torch.stack([model.new_full(shape, fill) if part is None else _padded(part, shape, fill)
                            for part in parts])

    def hidden_leaf(lstms: list[EvolvableLSTM], *parts: torch.Tensor | None) -> torch.Tensor:
        present = next(part for part in parts if part is not None)
        shape = (max(lstm.num_layers for lstm in lstms), width, max(lstm.hidden_state_size for lstm in lstms))
        return torch.stack([_padded(part, shape) if part is not None else present.new_zeros(shape) for part in parts])

    hidden = [None if batch is None else member.fit_hidden(cast(HiddenStates, batch.initial_hidden))
              for member, batch in zip(members, batches, strict=True)]
    template = next(state for state in hidden if state is not None)
    initial = {name: tuple(hidden_leaf([member._lstms()[name] for member in members],  # the group's deepest, widest
                                       *[None if state is None else state[name][k] for state in hidden])
                           for k in range(2)) for name in template}
    rows = length * width
    mask = stacked(lambda _, batch: batch.loss_mask, False).to(torch.float32).reshape(len(members), rows)
    actions = stacked(lambda member, batch: member._flat_action(batch.actions, batch.old_log_probs.shape))
    masks = None if like.action_masks is None else stacked(lambda _, batch: batch.action_masks, True)
    scalars = [stacked(lambda _, batch, name=name: getattr(batch, name)).reshape(len(members), rows)
               for name in ("old_log_probs", "old_values", "advantages", "returns")]
    return PPOMinibatch(
        obs=stacked(lambda _, batch: batch.obs), actions=actions.reshape(len(members), rows, *actions.shape[3:]),
        old_log_probs=scalars[0], old_values=scalars[1], advantages=scalars[2], returns=scalars[3], mask=mask,
        counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
        action_masks=None if masks is None else masks.reshape(len(members), rows, -1),
        starts=stacked(lambda _, batch: batch.episode_starts, False),
        initial_hidden=initial)  # type: ignore[arg-type]


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A float32 array of `tensor`'s entries, flattened."""
    return tensor.reshape(-1).cpu().numpy().astype(np.float32)


class _MemberRows:
    """The learning members' rollouts flattened to rows and stacked ``[P, rows, ...]`` (zero-padded
    to the longest; an idle member's rows stay empty), from which minibatches are gathered."""

    def __init__(self, group: MemberGroup, buffers: Sequence[RolloutBuffer | None]) -> None:
        first = cast("PPO", group.members[0])
        self.device = group.device
        self.size = len(buffers)
        counts = [0 if buffer is None else buffer.size * buffer.num_envs for buffer in buffers]
        self.rows = max(counts)

        present = [buffer is not None for buffer in buffers]

        def stacked(field: Any) -> Any:
            parts = [None if buffer is None else field(buffer) for buffer in buffers]
            like = next(part for part in parts if part is not None)
            filled = [like if part is None else part for part in parts]
            return map_tree(lambda *leaves: self._stack(list(leaves), present), filled[0], *filled[1:])

        self.obs = stacked(lambda b: map_tree(lambda leaf: leaf[: b.size].flatten(0, 1), b.observations))
        self.actions = stacked(lambda b: first._flat_action(b.actions[: b.size].flatten(0, 1),
                                                            torch.Size([b.size * b.num_envs])))
        self.scalars = stacked(lambda b: torch.stack([b.log_probs[: b.size], b.values[: b.size], b.advantages[: b.size],
                                                      b.returns[: b.size]], dim=-1).flatten(0, 1))
        masked = [buffer is not None and buffer.action_masks is not None for buffer in buffers]
        self.masks = None
        if any(masked):
            width = next(b.action_masks.shape[-1] for b, on in zip(buffers, masked, strict=True) if on and b is not None
                         and b.action_masks is not None)
            self.masks = torch.ones(self.size, self.rows, width, dtype=torch.bool, device=self.device)
            for slot, buffer in enumerate(buffers):
                if buffer is not None and buffer.action_masks is not None:
                    self.masks[slot, : counts[slot]] = buffer.action_masks[: buffer.size].flatten(0, 1)

    def _stack(self, leaves: list[torch.Tensor], present: list[bool]) -> torch.Tensor:
        """One leaf of every member ``[rows_p, ...]`` as ``[P, rows, ...]`` (a view when ``P = 1``)."""
        if self.size == 1:
            return leaves[0].unsqueeze(0)
        out = leaves[0].new_zeros(self.size, self.rows, *leaves[0].shape[1:])
        for slot, (leaf, here) in enumerate(zip(leaves, present, strict=True)):
            if here:
                out[slot, : leaf.shape[0]] = leaf
        return out

    def minibatch(self, picks: Sequence[np.ndarray]) -> PPOMinibatch:
        """The members' minibatches of rollout rows `picks` (empty for a member that sits out)."""
        padded, weights = pad_index_batches(picks)
        members, width = padded.shape
        mask = torch.as_tensor(weights > 0, device=self.device).to(torch.float32)
        flat = torch.as_tensor((padded + np.arange(members)[:, None] * self.rows).reshape(-1), device=self.device)

        def take(stacked: torch.Tensor) -> torch.Tensor:
            return stacked.flatten(0, 1).index_select(0, flat).unflatten(0, (members, width))

        old_log_probs, old_values, advantages, returns = take(self.scalars).unbind(-1)
        return PPOMinibatch(obs=map_tree(take, self.obs), actions=take(self.actions), old_log_probs=old_log_probs,
                            old_values=old_values, advantages=advantages, returns=returns,
                            mask=mask, counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
                            action_masks=None if self.masks is None else take(self.masks))


class PPO(SingleAgentAlgorithm):
    """PPO agent for one Gymnasium (vector) environment.

    Args:
        observation_space: Space of one observation (Box vectors or images, Discrete,
            MultiDiscrete, MultiBinary, Dict/Tuple of those; recurrent: vector spaces only).
        action_space: Discrete, Box, MultiDiscrete (1-D) or MultiBinary space of one sub-env.
        index: Agent index in the population.
        hp_config: Hyperparameters that RL-HP mutation may change, with their ranges.
        net_config: Architecture of the networks (a ``NetworkSpec`` or its dict form).
        batch_size: Rows per minibatch. Recurrent: sequences per minibatch are
            ``max(1, batch_size // sequence length)``.
        lr: Adam learning rate (one optimizer over actor and critic).
        learn_step: Environment steps per rollout, over all sub-envs (the buffer holds
            ``ceil(learn_step / num_envs)`` vector steps, see :meth:`rollout_steps`).
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        action_std_init: Initial standard deviation of the Gaussian policy (Box actions).
        clip_coef: Clipping range epsilon of the ratio (and of the value with ``clip_vloss``).
        ent_coef: Weight of the entropy bonus.
        vf_coef: Weight of the value loss.
        max_grad_norm: Global gradient-norm clipping threshold.
        target_kl: Stop the update when a minibatch's approximate KL exceeds this (None: never).
        update_epochs: Passes over each rollout.
        share_encoders: One encoder for actor and critic (:class:`SharedActorCritic`).
        recurrent: LSTM encoders, trained with backpropagation through time.
        bptt_sequence_type: How rollouts are cut into BPTT sequences
            (``"chunked"``, ``"maximum"``, ``"fifty_percent_overlap"``).
        max_seq_len: BPTT sequence length (None: the whole rollout).
        normalize_advantages: Standardise advantages within each minibatch.
        clip_vloss: Clip the value update like the ratio.
        use_gae: GAE advantages; Monte-Carlo returns minus the value when False.
        normalize_images: Scale uint8 image observations to [0, 1].
        device: Torch device of the networks.
        seed: Seeds network initialisation and minibatch shuffling (None: fresh entropy).
            Action sampling uses torch's global generator.
        actor_network: A pre-built policy to start from (cloned; `net_config` is ignored): a
            :class:`SharedActorCritic` when ``share_encoders`` else a :class:`StochasticActor`.
        critic_network: A pre-built :class:`ValueNetwork` (only without shared encoders).
    """

    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (
        spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary,
    )
    hyperparameter_names: ClassVar[tuple[str, ...]] = (
        "batch_size", "lr", "learn_step", "gamma", "gae_lambda", "action_std_init", "clip_coef",
        "ent_coef", "vf_coef", "max_grad_norm", "target_kl", "update_epochs", "max_seq_len",
    )

    actor: StochasticActor
    critic: ValueNetwork
    optimizer: torch.optim.Optimizer

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        batch_size: int = _DEFAULTS["batch_size"],
        lr: float = _DEFAULTS["lr"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        gae_lambda: float = _DEFAULTS["gae_lambda"],
        action_std_init: float = _DEFAULTS["action_std_init"],
        clip_coef: float = _DEFAULTS["clip_coef"],
        ent_coef: float = _DEFAULTS["ent_coef"],
        vf_coef: float = _DEFAULTS["vf_coef"],
        max_grad_norm: float = _DEFAULTS["max_grad_norm"],
        target_kl: float | None = _DEFAULTS["target_kl"],
        update_epochs: int = _DEFAULTS["update_epochs"],
        share_encoders: bool = _DEFAULTS["share_encoders"],
        recurrent: bool = _DEFAULTS["recurrent"],
        bptt_sequence_type: Literal["chunked", "maximum", "fifty_percent_overlap"] = _DEFAULTS["bptt_sequence_type"],
        max_seq_len: int | None = _DEFAULTS["max_seq_len"],
        normalize_advantages: bool = _DEFAULTS["normalize_advantages"],
        clip_vloss: bool = _DEFAULTS["clip_vloss"],
        use_gae: bool = _DEFAULTS["use_gae"],
        normalize_images: bool = _DEFAULTS["normalize_images"],
        device: str | torch.device = "cpu",
        seed: int | None = None,
        actor_network: EvolvableModule | None = None,
        critic_network: EvolvableModule | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        if isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim != 1:
            raise ValueError(f"PPO supports 1-D MultiDiscrete action spaces only, got {action_space}")
        PPOSpec.check_values(locals())
        self.batch_size = int(batch_size)
        self.lr = float(lr)
        self.learn_step = int(learn_step)
        self.gamma = float(gamma)
        self.gae_lambda = float(gae_lambda)
        self.action_std_init = float(action_std_init)
        self.clip_coef = float(clip_coef)
        self.ent_coef = float(ent_coef)
        self.vf_coef = float(vf_coef)
        self.max_grad_norm = float(max_grad_norm)
        self.target_kl = None if target_kl is None else float(target_kl)
        self.update_epochs = int(update_epochs)
        self.share_encoders = bool(share_encoders)
        self.recurrent = bool(recurrent)
        self.bptt_sequence_type = bptt_sequence_type
        self.max_seq_len = None if max_seq_len is None else int(max_seq_len)
        self.normalize_advantages = bool(normalize_advantages)
        self.clip_vloss = bool(clip_vloss)
        self.use_gae = bool(use_gae)
        self.normalize_images = bool(normalize_images)
        self.rng = np.random.default_rng(seed)

        self._build_networks(net_config, seed, actor_network, critic_network)
        if self.share_encoders:
            self.register_network_group("actor")
            self.register_optimizer("optimizer", ["actor"], "lr", eps=1e-5)
        else:
            self.register_network_group("actor", "critic")
            self.register_optimizer("optimizer", ["actor", "critic"], "lr", eps=1e-5)

    def _build_networks(self, net_config: Any, seed: int | None, actor_network: EvolvableModule | None,
                        critic_network: EvolvableModule | None) -> None:
        """Create (or adopt clones of) the actor and, without shared encoders, the critic."""
        expected = SharedActorCritic if self.share_encoders else StochasticActor
        if actor_network is not None and not isinstance(actor_network, expected):
            raise ValueError(f"actor_network must be a {expected.__name__} when share_encoders="
                             f"{self.share_encoders}, got {type(actor_network).__name__}")
        if self.share_encoders and critic_network is not None:
            raise ValueError("critic_network cannot be given with share_encoders=True: the value head "
                             "lives on the actor's SharedActorCritic")
        if critic_network is not None and not isinstance(critic_network, ValueNetwork):
            raise ValueError(f"critic_network must be a ValueNetwork, got {type(critic_network).__name__}")
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            kwargs: dict[str, Any] = {"action_std_init": self.action_std_init, "recurrent": self.recurrent}
            actor = actor_network.clone() if actor_network is not None else expected(
                self.observation_space, self.action_space, net_config, **kwargs)
            critic = None
            if not self.share_encoders:
                critic = critic_network.clone() if critic_network is not None else ValueNetwork(
                    self.observation_space, net_config, recurrent=self.recurrent)
        for name, network in (("actor_network", actor), ("critic_network", critic)):
            if network is not None and network.recurrent != self.recurrent:
                raise ValueError(f"{name} is {'' if network.recurrent else 'not '}recurrent but "
                                 f"recurrent={self.recurrent}")
        self.actor = actor.to(self.device)
        if critic is not None:
            self.critic = critic.to(self.device)

    # ------------------------------------------------------------------ networks
    @property
    def networks(self) -> list[EvolvableNetwork]:
        """The networks holding encoders: ``[actor]`` (shared) or ``[actor, critic]``."""
        return [self.actor] if self.share_encoders else [self.actor, self.critic]

    def _value_head(self) -> EvolvableMLP:
        """The head mapping the critic's latent to ``V(s)``."""
        head = self.actor.value_head if self.share_encoders else self.critic.head
        return cast(EvolvableMLP, head)

    def preprocess(self, obs: Any) -> Any:
        """Observation tensors on the agent's device (see ``preprocess_observation``)."""
        return preprocess_observation(self.observation_space, obs, self.device, self.normalize_images)

    def _encode(self, obs: Any, hidden: HiddenStates | None) -> tuple[torch.Tensor, torch.Tensor, HiddenStates | None]:
        """Actor latent, critic latent and the new recurrent state for one step of `obs`."""
        if not self.recurrent:
            latent = self.actor.encode(obs)[0]
            critic_latent = latent if self.share_encoders else self.critic.encode(obs)[0]
            return latent, critic_latent, None
        batch = obs.shape[0]
        hidden = hidden if hidden is not None else self.initial_hidden(batch)
        hidden = self.fit_hidden(hidden)
        latent, actor_state = self.actor.encode(obs, hidden["actor"])
        new_hidden: HiddenStates = {"actor": actor_state}  # type: ignore[dict-item]
        if self.share_encoders:
            return latent, latent, new_hidden
        critic_latent, critic_state = self.critic.encode(obs, hidden["critic"])
        new_hidden["critic"] = critic_state  # type: ignore[assignment]
        return latent, critic_latent, new_hidden

    def _flat_action(self, action: torch.Tensor, lead: torch.Size) -> torch.Tensor:
        """Actions as the distributions take them: ``[*lead]`` (Discrete) or ``[*lead, size]``."""
        if isinstance(self.action_space, spaces.Discrete):
            return action.reshape(lead)
        return action.reshape(*lead, -1)

    def _action_shape(self) -> tuple[int, ...]:
        return () if isinstance(self.action_space, spaces.Discrete) else tuple(self.action_space.shape or ())

    # ------------------------------------------------------------------ recurrent state
    def _lstms(self) -> dict[str, EvolvableLSTM]:
        names = {"actor": self.actor} if self.share_encoders else {"actor": self.actor, "critic": self.critic}
        encoders = {name: net.encoder for name, net in names.items()}
        if not all(isinstance(e, EvolvableLSTM) for e in encoders.values()):
            raise ValueError("this PPO agent is not recurrent")
        return encoders  # type: ignore[return-value]

    def hidden_state_shapes(self, num_envs: int) -> dict[str, Any]:
        """Shapes of the recurrent state for `num_envs` sub-envs (for ``RolloutBuffer``):
        ``{"actor": (shape, shape)[, "critic": (shape, shape)]}`` with ``shape = (num_layers,
        num_envs, hidden_state_size)``."""
        shapes: dict[str, Any] = {}
        for name, lstm in self._lstms().items():
            shape = (lstm.num_layers, int(num_envs), lstm.hidden_state_size)
            shapes[name] = (shape, shape)
        return shapes

    def initial_hidden(self, num_envs: int) -> HiddenStates:
        """Zero recurrent state for `num_envs` sub-envs."""
        return {name: lstm.initial_hidden_state(num_envs) for name, lstm in self._lstms().items()}

    def fit_hidden(self, hidden: HiddenStates) -> HiddenStates:
        """`hidden` padded with zeros / cut to the current LSTM sizes (unchanged when they fit).

        Growth mutations are function-preserving for a zero-padded state; shrinking keeps the
        leading units. Collection resets the state after a size change instead (see collect.py).
        """
        fitted: HiddenStates = {}
        for name, lstm in self._lstms().items():
            h, c = hidden[name]
            fitted[name] = (_fit_state(h, lstm.num_layers, lstm.hidden_state_size),
                            _fit_state(c, lstm.num_layers, lstm.hidden_state_size))
        return fitted

    @staticmethod
    def mask_hidden(hidden: HiddenStates, reset: Any) -> HiddenStates:
        """`hidden` with the state of the sub-envs where `reset` (``[num_envs]`` bool) is True zeroed."""
        keep: torch.Tensor | None = None
        masked: HiddenStates = {}
        for name, (h, c) in hidden.items():
            if keep is None:
                keep = (~torch.as_tensor(reset, dtype=torch.bool, device=h.device)).to(h.dtype)[None, :, None]
            masked[name] = (h * keep, c * keep)
        return masked

    # ------------------------------------------------------------------ acting
    def get_action(
        self,
        obs: Any,
        action_mask: Any = None,
        hidden_state: HiddenStates | None = None,
        *,
        deterministic: bool = False,
    ) -> tuple[Any, ...]:
        """Act on a batch of observations: ``(action, log_prob, entropy, value[, hidden])``.

        * ``action``: the policy's raw sample, the one to store in the buffer: int64 indices
          ``[N]`` from 0 (Discrete), int64 ``[N, k]`` from 0 (MultiDiscrete), float32 0/1
          ``[N, *shape]`` (MultiBinary) or float32 unclipped ``[N, *shape]`` (Box). Send
          :meth:`to_env_action` of it to the environment (adds ``start``, clips to bounds).
        * ``log_prob``, ``entropy``, ``value``: float32 ``[N]``; ``log_prob`` is of the raw
          (unclipped) action, summed over action components.
        * ``hidden`` (recurrent agents only, always returned then): the new recurrent state.

        `action_mask` (``[N, n]`` or ``[N, sum(nvec)]``, truthy = allowed) restricts Discrete and
        MultiDiscrete choices (see :meth:`prepare_action_mask`; ignored for other spaces). `hidden_state` is the recurrent state fed to the policy (zeros
        when None; the caller zeroes it at episode starts, see :meth:`mask_hidden`).
        `deterministic` takes the greedy action (mode / mean). An unbatched observation gets a
        batch dimension of 1. The ``P = 1`` case of :meth:`act_population`.
        """
        mask = self.prepare_action_mask(action_mask)
        hidden = None if hidden_state is None else _member_axis(self.fit_hidden(hidden_state), add=True)
        step = type(self).act_population(self.solo_group(), with_member_axis(self.preprocess(obs)), None,
                                         None if mask is None else mask.unsqueeze(0), training=not deterministic,
                                         hidden_state=hidden)
        with torch.no_grad():
            entropy = step.distribution.entropy()
        assert step.value is not None
        outputs = (self.env_actions(step.action), _numpy(step.log_prob), _numpy(entropy), _numpy(step.value))
        if self.recurrent:
            assert step.hidden is not None
            return (*outputs, _member_axis(step.hidden, add=False))
        return outputs

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, epsilons: Sequence[float | None] | None = None,
                       action_masks: torch.Tensor | None = None, training: bool = True, *,
                       hidden_state: HiddenStates | None = None, values: bool = True) -> PolicyStep:
        """The policy of every member of `group` on network inputs ``[P, rows, ...]``: sampled raw
        actions (torch's global RNG, one draw for the whole group) or, without `training`, the
        greedy ones (mode / mean), their log-probabilities and (with `values`) the values, all
        ``[P, rows, ...]``. `action_masks` ``[P, rows, n]`` (prepared, see :meth:`prepare_action_mask`)
        restricts discrete choices; `epsilons` is unused (PPO explores by sampling);
        `hidden_state` is the members' recurrent state, leaves ``[P, layers, rows, H]`` (zeros when
        None)."""
        with torch.no_grad():
            heads, value, hidden = cls._heads(group, inputs, hidden_state, critic=values)
            dist = cls._policy(group).distribution_from_head(heads, action_masks)
            action = dist.sample() if training else dist.mode()
            return PolicyStep(action, dist.log_prob(action), value, hidden, dist)

    @classmethod
    def value_population(cls, group: MemberGroup, inputs: Any, hidden_state: HiddenStates | None = None) -> torch.Tensor:
        """``V(s)`` ``[P, rows]`` of every member of `group` for network inputs ``[P, rows, ...]``."""
        with torch.no_grad():
            value = cls._heads(group, inputs, hidden_state, policy=False)[1]
        assert value is not None
        return value

    @classmethod
    def _policy(cls, group: MemberGroup) -> StochasticActor:
        """The actor whose distributions a group's head outputs parameterise."""
        return cast(StochasticActor, group.nets["actor"] if group.stacked else group.members[0].actor)

    @classmethod
    def _heads(cls, group: MemberGroup, inputs: Any, hidden_state: HiddenStates | None = None, *,
               policy: bool = True, critic: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, HiddenStates | None]:
        """Policy-head outputs ``[P, rows, n]`` (when `policy`), values ``[P, rows]`` (when `critic`)
        and the new recurrent state of network inputs ``[P, rows, ...]``: the stacked networks of
        `group`, or the member's own for a group of one that does not stack (recurrent,
        convolutional...), run on its rows and given back a member axis of 1."""
        if group.stacked:
            actor = cast(StochasticActor, group.nets["actor"])
            separate = cast(ValueNetwork | None, group.nets.get("critic"))
            if actor.recurrent:
                return cls._recurrent_heads(group, inputs, hidden_state, policy=policy, critic=critic)
            if separate is not None:  # encoder and head of each network as one (fused) chain
                heads = actor.head_of_latent(inputs) if policy else actor.encode(inputs)[0]
                return heads, separate.head_of_latent(inputs).squeeze(-1) if critic else None, None
            if policy and critic:  # the shared encoder runs once for both heads
                heads, value = actor.heads_of_latent(inputs, ("head", "value_head"))
                return heads, value.squeeze(-1), None
            latent = actor.encode(inputs)[0]
            heads = actor.head(latent) if policy else latent
            if not critic:
                return heads, None, None
            return heads, cast(SharedActorCritic, actor).value_head(latent).squeeze(-1), None
        member = cast(PPO, group.members[0])
        latent, critic_latent, hidden = member._encode(map_tree(lambda leaf: leaf.squeeze(0), inputs),
                                                       _member_axis(hidden_state, add=False))
        heads = member.actor.head(latent).unsqueeze(0) if policy else latent
        value = member._value_head()(critic_latent).squeeze(-1).unsqueeze(0) if critic else None
        return heads, value, _member_axis(hidden, add=True)

    @classmethod
    def _recurrent_heads(cls, group: MemberGroup, inputs: torch.Tensor, hidden_state: HiddenStates | None, *,
                         policy: bool, critic: bool) -> tuple[torch.Tensor, torch.Tensor | None, HiddenStates]:
        """:meth:`_heads` of a stacked recurrent group for one step: the LSTM encoders advance
        from `hidden_state` (zeros when None); a separate critic runs only when values are asked for."""
        nets = cls._recurrent_networks(group)
        if hidden_state is None:
            hidden_state = cls.population_hidden(group, inputs.shape[1])
        new: HiddenStates = {}
        latents: dict[str, torch.Tensor] = {}
        for name, net in nets.items():
            if name == "critic" and not critic:
                continue
            latents[name], new[name] = net.encode(inputs, hidden_state[name])  # type: ignore[assignment]
        heads, value = cls._latent_heads(group, latents["actor"], latents.get("critic", latents["actor"]),
                                         policy=policy, critic=critic)
        return heads, value, new

    @classmethod
    def population_hidden(cls, group: MemberGroup, rows: int) -> HiddenStates:
        """Zero recurrent state of a recurrent group's members for `rows` sub-envs, leaves
        ``[P, layers, rows, H]`` (stacked members of different sizes: the widest ``H``)."""
        if not group.stacked:
            return cast(HiddenStates, _member_axis(cast(PPO, group.members[0]).initial_hidden(rows), add=True))
        return {name: cast(EvolvableLSTM, net.encoder).initial_hidden_state(rows)
                for name, net in cls._recurrent_networks(group).items()}

    @classmethod
    def member_hidden(cls, group: MemberGroup, hidden: Mapping[str, tuple[Any, Any]]) -> list[dict[str, tuple[Any, Any]]]:
        """A group's recurrent state ``[P, layers, rows, H]`` as each member's own
        ``[layers, rows, H_p]``: views cut to its own LSTM size (tensors or numpy arrays alike;
        a group's state is as deep and wide as its deepest and widest member)."""
        cut: list[dict[str, tuple[Any, Any]]] = []
        for slot, member in enumerate(group.members):
            lstms = cast(PPO, member)._lstms()
            cut.append({name: tuple(leaf[slot, :lstms[name].num_layers, :, :lstms[name].hidden_state_size]
                                    for leaf in pair) for name, pair in hidden.items()})
        return cut

    @classmethod
    def _recurrent_networks(cls, group: MemberGroup) -> dict[str, EvolvableNetwork]:
        """The stacked networks with LSTM encoders: ``{"actor"[, "critic"]}``."""
        return {name: cast(EvolvableNetwork, group.nets[name]) for name in ("actor", "critic") if name in group.nets}

    @classmethod
    def _latent_heads(cls, group: MemberGroup, latent: torch.Tensor, critic_latent: torch.Tensor, *,
                      policy: bool = True, critic: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Policy-head outputs (the latent itself without `policy`) and values ``[P, rows]`` (when
        `critic`) of the members' latents ``[P, rows, D]``."""
        if group.stacked:
            actor = cast(StochasticActor, group.nets["actor"])
            value_head = cast(ValueNetwork, group.nets["critic"]).head if "critic" in group.nets else \
                cast(SharedActorCritic, actor).value_head
            heads = actor.head(latent) if policy else latent
            return heads, value_head(critic_latent).squeeze(-1) if critic else None
        member = cast(PPO, group.members[0])
        heads = member.actor.head(latent[0]).unsqueeze(0) if policy else latent
        return heads, member._value_head()(critic_latent[0]).squeeze(-1).unsqueeze(0) if critic else None

    def env_actions(self, raw: torch.Tensor) -> np.ndarray:
        """Raw actions (``[P, rows, ...]`` or ``[rows, ...]``) as :meth:`get_action` returns them,
        rows flattened member-major: int64 indices for Discrete and MultiDiscrete, float32 otherwise."""
        discrete = isinstance(self.action_space, spaces.Discrete | spaces.MultiDiscrete)
        return raw.reshape(-1, *self._action_shape()).cpu().numpy().astype(np.int64 if discrete else np.float32)

    def prepare_action_mask(self, action_mask: Any) -> torch.Tensor | None:
        """`action_mask` as the bool tensor the policy applies (on the agent's device), or None.

        None when no mask is given or the action space takes none (Box, MultiBinary). A row (or,
        for MultiDiscrete, a component) that allows no action at all allows every action: that
        is what a vector env reports for a sub-env whose step info carried no mask. Collection
        stores this same tensor in the rollout buffer, so learning re-scores every action under
        the distribution it was sampled from.
        """
        return prepare_action_mask(self.action_space, action_mask, self.device)

    def get_value(self, obs: Any, hidden_state: HiddenStates | None = None) -> np.ndarray:
        """``V(obs)`` float32 ``[N]`` (recurrent: given the state fed at that step)."""
        hidden = None if hidden_state is None else _member_axis(self.fit_hidden(hidden_state), add=True)
        return _numpy(type(self).value_population(self.solo_group(), with_member_axis(self.preprocess(obs)), hidden))

    def to_env_action(self, action: Any) -> np.ndarray:
        """What the environment receives for raw policy actions: ``start`` added for Discrete and
        MultiDiscrete, Box samples clipped to the bounds (in the space's dtype), MultiBinary as int8."""
        return to_env_action(self.action_space, action)

    # ------------------------------------------------------------------ buffers
    def rollout_steps(self, num_envs: int) -> int:
        """Vector steps per rollout: ``ceil(learn_step / num_envs)``, at least 1."""
        return rollout_vector_steps(self.learn_step, num_envs)

    def create_rollout_buffer(self, num_envs: int, num_steps: int | None = None) -> RolloutBuffer:
        """An empty rollout buffer for this agent's spaces, discounting and recurrent state."""
        return RolloutBuffer(
            num_steps=num_steps or self.rollout_steps(num_envs),
            num_envs=int(num_envs),
            observation_space=self.observation_space,
            action_space=self.action_space,
            device=self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            use_gae=self.use_gae,
            recurrent=self.recurrent,
            hidden_state_shapes=self.hidden_state_shapes(num_envs) if self.recurrent else None,
        )

    # ------------------------------------------------------------------ learning
    def learn(self, buffer: RolloutBuffer) -> dict[str, float]:
        """Run the PPO update on a collected rollout whose returns and advantages are computed.

        Returns the mean over the applied minibatches of ``loss``, ``policy_loss``,
        ``value_loss``, ``entropy``, ``approx_kl`` and ``clip_fraction``, plus
        ``explained_variance`` of the rollout's values, ``epochs`` (passes started),
        ``minibatches`` (gradient steps taken) and ``early_stop`` (1.0 when ``target_kl`` cut it).

        Actions collected under an action mask are re-scored under the same mask (stored in the
        buffer), so masked actions keep zero probability and the ratio compares like with like.
        The ``P = 1`` case of :meth:`learn_population`, run through the agent's group of one.
        """
        stats = type(self).learn_population(self.solo_group(), [buffer], [True])[0]
        assert stats is not None
        return stats

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: Sequence[RolloutBuffer | None],
                         active: Sequence[bool] | None = None) -> list[dict[str, float] | None]:
        """The PPO update of every active member of `group` on its own rollout (``batch[p]``,
        returns and advantages computed; None for an idle member); each member's :meth:`learn`
        statistics, None for the idle ones.

        Every member keeps its own learning rule: its minibatch order drawn from its own ``rng``
        as :meth:`learn` draws it, ``update_epochs``, ``batch_size`` (smaller minibatches are
        padded and weigh nothing), ``clip_coef``, ``ent_coef``, ``vf_coef``, ``max_grad_norm``,
        ``normalize_advantages``, ``clip_vloss``, learning rate and Adam state, and ``target_kl``
        (a member whose KL exceeds its target stops and goes idle, the others go on). Each member's
        gradient steps run back to back across its epochs, so the group takes as many steps as
        its busiest member. Recurrent members learn from BPTT sequences (each member's own
        sequence length and count, padded across members).
        """
        rollouts = list(batch)
        size = len(group)
        if len(rollouts) != size:
            raise ValueError(f"expected {size} rollouts (None for idle members), got {len(rollouts)}")
        learning = [rollout is not None and (active is None or bool(active[slot])) for slot, rollout in enumerate(rollouts)]
        if not any(learning):
            return [None] * size
        members = cast(list[PPO], group.members)
        for member, on in zip(members, learning, strict=True):
            for network in member.networks if on else ():
                network.train()
        epochs = [0] * size
        schedules = [member._schedule(rollout, epochs, slot) if on and rollout is not None else None
                     for slot, (member, rollout, on) in enumerate(zip(members, rollouts, learning, strict=True))]
        rows = None if members[0].recurrent else _MemberRows(group, [r if on else None for r, on in
                                                                    zip(rollouts, learning, strict=True)])
        running, stopped = list(learning), [False] * size
        steps = np.zeros(size, dtype=np.int64)
        totals = torch.zeros(size, len(LOSS_NAMES), device=group.device)
        targets = [member.target_kl for member in members]
        while True:
            picks = [next(schedule, None) if running[slot] and schedule is not None else None
                     for slot, schedule in enumerate(schedules)]
            running = [pick is not None for pick in picks]
            if not any(running):
                break
            if rows is None:
                minibatch = sequence_minibatch(members, cast(list[RecurrentBatch | None], picks))
            else:
                minibatch = rows.minibatch([np.zeros(0, np.int64) if pick is None else pick for pick in picks])
            losses, stats = cls._losses(group, minibatch)
            stepping = list(running)
            if any(target is not None for target in targets):
                kls = stats[:, LOSS_NAMES.index("approx_kl")].tolist()
                for slot, target in enumerate(targets):
                    if running[slot] and target is not None and kls[slot] > target:
                        running[slot] = stepping[slot] = False
                        stopped[slot] = True
            if not any(stepping):
                continue
            mask = group.flags(stepping)
            group.step("optimizer", losses * mask.squeeze(1), stepping, group.column("max_grad_norm").squeeze(1))
            totals += stats.detach() * mask
            steps += np.asarray(stepping)
        sums = totals.cpu().tolist()
        results: list[dict[str, float] | None] = []
        for slot, (member, rollout) in enumerate(zip(members, rollouts, strict=True)):
            if not learning[slot] or rollout is None:
                results.append(None)
                continue
            member.learn_counter += 1
            count = int(steps[slot])
            result = {name: (sums[slot][i] / count if count else float("nan")) for i, name in enumerate(LOSS_NAMES)}
            result.update(explained_variance=member._explained_variance(rollout), epochs=float(epochs[slot]),
                          minibatches=float(count), early_stop=float(stopped[slot]))
            results.append(result)
        return results

    def population_key(self) -> str:
        """Members of one group share encoders or not, recurrence and image scaling."""
        return f"{super().population_key()}|{self.share_encoders}|{self.recurrent}|{self.normalize_images}"

    def _schedule(self, buffer: RolloutBuffer, epochs: list[int], slot: int) -> Iterator[Any]:
        """This agent's minibatches over all its epochs, drawn from its ``rng`` as :meth:`learn`
        draws them: flat row indices, or BPTT sequences when recurrent; ``epochs[slot]`` counts
        the epochs started."""
        for _ in range(self.update_epochs):
            epochs[slot] += 1
            if self.recurrent:
                yield from self._minibatches(buffer)
            else:
                yield from buffer.minibatch_indices(self.batch_size, self.rng)

    def _minibatches(self, buffer: RolloutBuffer) -> Iterator[Batch]:
        """One epoch of minibatches: flat rows, or BPTT sequences when recurrent."""
        if not self.recurrent:
            yield from buffer.minibatches(self.batch_size, self.rng)
            return
        seq_len = buffer.size if self.max_seq_len is None else min(self.max_seq_len, buffer.size)
        if self.bptt_sequence_type == "maximum":
            seq_len = buffer.size
        sequences = max(1, self.batch_size // seq_len)
        yield from buffer.recurrent_minibatches(seq_len, sequences, self.rng, self.bptt_sequence_type)

    def minibatch_of(self, batch: Batch) -> PPOMinibatch:
        """One of this agent's minibatches as the ``P = 1`` :class:`PPOMinibatch`: a flat batch's
        ``B`` rows all count; of a recurrent batch's ``L x B`` steps (replayed from their stored
        initial state) those in its ``loss_mask``."""
        if isinstance(batch, RecurrentBatch):
            return sequence_minibatch([self], [batch])
        mask = torch.ones(1, batch.old_log_probs.shape[0], device=batch.old_log_probs.device)
        lead = batch.old_log_probs.shape
        masks = batch.action_masks
        return PPOMinibatch(
            obs=map_tree(lambda leaf: leaf.unsqueeze(0), batch.obs),
            actions=self._flat_action(cast(torch.Tensor, batch.actions), lead).unsqueeze(0),
            old_log_probs=batch.old_log_probs.reshape(1, -1), old_values=batch.old_values.reshape(1, -1),
            advantages=batch.advantages.reshape(1, -1), returns=batch.returns.reshape(1, -1),
            mask=mask, counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
            action_masks=None if masks is None else masks.reshape(1, lead.numel(), -1))

    @classmethod
    def _evaluate(cls, group: MemberGroup, minibatch: PPOMinibatch) -> tuple[Any, torch.Tensor]:
        """The current action distribution and values ``[P, rows]`` of a minibatch (under its
        stored action masks); recurrent sequences are replayed from their stored initial state
        (see :meth:`_unroll`)."""
        if minibatch.starts is None:
            inputs = group.members[0].population_inputs(minibatch.obs)
            heads, value, _ = cls._heads(group, inputs)
        else:
            latent, critic_latent = cls._unroll(group, minibatch)
            heads, value = cls._latent_heads(group, latent.flatten(1, 2), critic_latent.flatten(1, 2))
        assert value is not None
        return cls._policy(group).distribution_from_head(heads, minibatch.action_masks), value

    @classmethod
    def _losses(cls, group: MemberGroup, minibatch: PPOMinibatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The PPO loss of every member's minibatch: the losses ``[P]`` to minimise and the
        statistics ``[P, 6]`` in ``LOSS_NAMES`` order (``approx_kl``, the ``E[(r - 1) - log r]``
        estimate of ``KL(pi_old || pi)``, and ``clip_fraction`` without gradients).

        Means over a member's rows are sums over ``minibatch.mask`` divided by ``minibatch.counts``,
        so padding and idle members weigh nothing."""
        dist, value = cls._evaluate(group, minibatch)
        return ppo_minibatch_losses(group, dist, value, minibatch)

    def compute_losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The PPO losses of one of this agent's minibatches under the current networks (the
        ``P = 1`` case of :meth:`_losses`): ``loss`` (the total to minimise), ``policy_loss``
        (clipped surrogate), ``value_loss``, ``entropy`` (mean), with gradients, and, without,
        ``approx_kl`` and ``clip_fraction``. Recurrent batches are weighted by their ``loss_mask``."""
        stats = type(self)._losses(self.solo_group(), self.minibatch_of(batch))[1][0]
        return {name: stats[index].detach() if name in ("approx_kl", "clip_fraction") else stats[index]
                for index, name in enumerate(LOSS_NAMES)}

    def evaluate_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Current ``log pi(a|s)``, entropy and ``V(s)`` of a minibatch's stored actions (under
        their stored action masks, if any), shaped like the batch, and its loss mask (None for
        flat batches; ``loss_mask`` ``[L, B]`` for recurrent ones)."""
        minibatch = self.minibatch_of(batch)
        dist, value = type(self)._evaluate(self.solo_group(), minibatch)
        lead = batch.old_log_probs.shape
        mask = batch.loss_mask if isinstance(batch, RecurrentBatch) else None
        return (dist.log_prob(minibatch.actions).reshape(lead), dist.entropy().reshape(lead), value.reshape(lead), mask)

    @classmethod
    def _unroll(cls, group: MemberGroup, minibatch: PPOMinibatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay a recurrent minibatch's time-major sequences ``[P, L, B, ...]`` through the
        members' LSTM encoders, each from its stored initial state and zeroed before every
        episode start; return actor and critic latents ``[P, L, B, D]``."""
        assert minibatch.starts is not None and minibatch.initial_hidden is not None
        members, length, width = minibatch.starts.shape
        obs = group.members[0].population_inputs(minibatch.obs.reshape(members, length * width, -1))
        x = obs.reshape(members, length, width, -1).movedim(1, 2)  # [P, B, L, ...]
        starts = minibatch.starts.movedim(1, 2)
        latents: dict[str, torch.Tensor] = {}
        if group.stacked:
            for name, net in cls._recurrent_networks(group).items():
                latents[name] = net.encoder(x, minibatch.initial_hidden[name], starts)[0]
        else:
            member = cast(PPO, group.members[0])
            initial = member.fit_hidden(cast(HiddenStates, _member_axis(minibatch.initial_hidden, add=False)))
            for name, lstm in member._lstms().items():
                latents[name] = lstm(x[0], initial[name], starts[0])[0].unsqueeze(0)
        actor = latents["actor"].movedim(2, 1)
        return actor, latents["critic"].movedim(2, 1) if "critic" in latents else actor

    @staticmethod
    def _explained_variance(buffer: RolloutBuffer) -> float:
        """``1 - Var(R - V) / Var(R)`` over the valid rows of the rollout (nan when Var(R) = 0)."""
        n = buffer.size
        valid = buffer.valid[:n]
        returns, values = buffer.returns[:n][valid], buffer.values[:n][valid]
        if returns.numel() < 2:
            return float("nan")
        var = returns.var(correction=0)
        return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var(correction=0) / var)

    # ------------------------------------------------------------------ evaluation
    def test(self, env: gym.Env | VectorEnv, swap_channels: bool = False, max_steps: int | None = None,
             loop: int = 1) -> float:
        """Greedy fitness: the mean return of `loop` episodes per sub-env; appended to ``fitness``.

        See :func:`agile_core.training.evaluation.evaluate_policy`: each round resets `env`, and
        every sub-env contributes its first episode (cut at `max_steps` vector steps when given).
        The policy takes its mode / mean action; an ``action_mask`` in the step info is
        respected. A recurrent policy starts every round from a zero state.
        """
        for network in self.networks:
            network.eval()
        scores = []
        rounds = loop if self.recurrent else 1
        for _ in range(rounds):
            state: dict[str, Any] = {"hidden": None}

            def act(obs: Any, info: dict[str, Any], state: dict[str, Any] = state) -> np.ndarray:
                out = self.get_action(obs, action_mask=info.get("action_mask"), hidden_state=state["hidden"],
                                      deterministic=True)
                if self.recurrent:
                    state["hidden"] = out[4]
                return self.to_env_action(out[0])

            scores.append(evaluate_policy(env, act, loop=1 if self.recurrent else loop, max_steps=max_steps,
                                          swap_channels=swap_channels))
        for network in self.networks:
            network.train()
        fitness = float(np.mean(scores))
        self.fitness.append(fitness)
        return fitness
