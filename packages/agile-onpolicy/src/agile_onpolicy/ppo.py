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

Code layout
-----------
This module holds the agent; the rest lives in :mod:`agile_onpolicy.ppo_networks` (networks),
:mod:`agile_onpolicy.ppo_hidden` (recurrent state), :mod:`agile_onpolicy.ppo_acting` (forward
pass and acting), :mod:`agile_onpolicy.ppo_minibatch` (minibatches) and
:mod:`agile_onpolicy.ppo_learning` (the update).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.group import MemberGroup, with_member_axis
from agile_core.algorithms.ppo_losses import LOSS_NAMES, prepare_action_mask, to_env_action
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import (
    EvolvableLSTM,
    EvolvableModule,
    EvolvableNetwork,
    StochasticActor,
    ValueNetwork,
    preprocess_observation,
)
from agile_core.specs.network import NetworkSpec
from agile_core.training.budget import rollout_vector_steps
from agile_core.training.evaluation import evaluate_policy
from agile_onpolicy import ppo_hidden
from agile_onpolicy.ppo_acting import PolicyStep, group_values, policy_step
from agile_onpolicy.ppo_hidden import HiddenStates, lstm_encoders, member_axis
from agile_onpolicy.ppo_learning import (
    epoch_minibatches,
    evaluate_minibatch,
    explained_variance,
    learn_members,
    minibatch_losses,
)
from agile_onpolicy.ppo_minibatch import (
    Batch,
    PPOMinibatch,
    flat_action,
    minibatch_of,
    sequence_minibatch,
)
from agile_onpolicy.ppo_networks import SharedActorCritic, build_networks
from agile_onpolicy.rollout import RecurrentBatch, RolloutBuffer
from agile_onpolicy.specs import PPOSpec

__all__ = [
    "LOSS_NAMES",
    "PPO",
    "Batch",
    "HiddenStates",
    "PPOMinibatch",
    "PolicyStep",
    "SharedActorCritic",
    "sequence_minibatch",
]

_DEFAULTS = PPOSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A float32 array of `tensor`'s entries, flattened."""
    return tensor.reshape(-1).cpu().numpy().astype(np.float32)


class PPO(SingleAgentAlgorithm):
    """PPO agent for one Gymnasium (vector) environment.

    The hyperparameters are ``PPOSpec``'s fields, with its defaults and rules.

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

    spec_class = PPOSpec
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (
        spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary,
    )

    # hyperparameters, set from PPOSpec (declared here for the type checker)
    batch_size: int
    lr: float
    learn_step: int
    gamma: float
    gae_lambda: float
    action_std_init: float
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: float | None
    update_epochs: int
    share_encoders: bool
    recurrent: bool
    bptt_sequence_type: Literal["chunked", "maximum", "fifty_percent_overlap"]
    max_seq_len: int | None
    normalize_advantages: bool
    clip_vloss: bool
    use_gae: bool
    normalize_images: bool

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
        self.adopt_hyperparameters(locals())
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        if isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim != 1:
            raise ValueError(f"PPO supports 1-D MultiDiscrete action spaces only, got {action_space}")
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
        actor, critic = build_networks(
            self.observation_space, self.action_space, net_config, share_encoders=self.share_encoders,
            recurrent=self.recurrent, action_std_init=self.action_std_init, seed=seed,
            actor_network=actor_network, critic_network=critic_network)
        self.actor = actor.to(self.device)
        if critic is not None:
            self.critic = critic.to(self.device)

    # ------------------------------------------------------------------ networks
    @property
    def networks(self) -> list[EvolvableNetwork]:
        """The networks holding encoders: ``[actor]`` (shared) or ``[actor, critic]``."""
        return [self.actor] if self.share_encoders else [self.actor, self.critic]

    def preprocess(self, obs: Any) -> Any:
        """Observation tensors on the agent's device (see ``preprocess_observation``)."""
        return preprocess_observation(self.observation_space, obs, self.device, self.normalize_images)

    def population_key(self) -> str:
        """Members of one group share encoders or not, recurrence and image scaling."""
        return f"{super().population_key()}|{self.share_encoders}|{self.recurrent}|{self.normalize_images}"

    # ------------------------------------------------------------------ recurrent state (ppo_hidden)
    def _lstms(self) -> dict[str, EvolvableLSTM]:
        return lstm_encoders(self)

    def hidden_state_shapes(self, num_envs: int) -> dict[str, Any]:
        """Shapes of the recurrent state for `num_envs` sub-envs (for ``RolloutBuffer``):
        ``{"actor": (shape, shape)[, "critic": (shape, shape)]}`` with ``shape = (num_layers,
        num_envs, hidden_state_size)``."""
        return ppo_hidden.hidden_state_shapes(self._lstms(), num_envs)

    def initial_hidden(self, num_envs: int) -> HiddenStates:
        """Zero recurrent state for `num_envs` sub-envs."""
        return ppo_hidden.zero_hidden(self._lstms(), num_envs)

    def fit_hidden(self, hidden: HiddenStates) -> HiddenStates:
        """`hidden` padded with zeros / cut to the current LSTM sizes (unchanged when they fit).

        Growth mutations are function-preserving for a zero-padded state; shrinking keeps the
        leading units. Collection resets the state after a size change instead (see collect.py).
        """
        return ppo_hidden.fit_hidden(self._lstms(), hidden)

    @staticmethod
    def mask_hidden(hidden: HiddenStates, reset: Any) -> HiddenStates:
        """`hidden` with the state of the sub-envs where `reset` (``[num_envs]`` bool) is True zeroed."""
        return ppo_hidden.mask_hidden(hidden, reset)

    @classmethod
    def population_hidden(cls, group: MemberGroup, rows: int) -> HiddenStates:
        """Zero recurrent state of a recurrent group's members for `rows` sub-envs, leaves
        ``[P, layers, rows, H]`` (stacked members of different sizes: the widest ``H``)."""
        return ppo_hidden.population_hidden(group, rows)

    @classmethod
    def member_hidden(cls, group: MemberGroup, hidden: Mapping[str, tuple[Any, Any]]) -> list[dict[str, tuple[Any, Any]]]:
        """A group's recurrent state ``[P, layers, rows, H]`` as each member's own
        ``[layers, rows, H_p]``: views cut to its own LSTM size (tensors or numpy arrays alike;
        a group's state is as deep and wide as its deepest and widest member)."""
        return ppo_hidden.member_hidden(group, hidden)

    # ------------------------------------------------------------------ acting (ppo_acting)
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
        hidden = None if hidden_state is None else member_axis(self.fit_hidden(hidden_state), add=True)
        step = type(self).act_population(self.solo_group(), with_member_axis(self.preprocess(obs)), None,
                                         None if mask is None else mask.unsqueeze(0), training=not deterministic,
                                         hidden_state=hidden)
        with torch.no_grad():
            entropy = step.distribution.entropy()
        assert step.value is not None
        outputs = (self.env_actions(step.action), _numpy(step.log_prob), _numpy(entropy), _numpy(step.value))
        if self.recurrent:
            assert step.hidden is not None
            return (*outputs, member_axis(step.hidden, add=False))
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
        return policy_step(group, inputs, action_masks, training, hidden_state=hidden_state, values=values)

    @classmethod
    def value_population(cls, group: MemberGroup, inputs: Any, hidden_state: HiddenStates | None = None) -> torch.Tensor:
        """``V(s)`` ``[P, rows]`` of every member of `group` for network inputs ``[P, rows, ...]``."""
        return group_values(group, inputs, hidden_state)

    def env_actions(self, raw: torch.Tensor) -> np.ndarray:
        """Raw actions (``[P, rows, ...]`` or ``[rows, ...]``) as :meth:`get_action` returns them,
        rows flattened member-major: int64 indices for Discrete and MultiDiscrete, float32 otherwise."""
        discrete = isinstance(self.action_space, spaces.Discrete | spaces.MultiDiscrete)
        return raw.reshape(-1, *self._action_shape()).cpu().numpy().astype(np.int64 if discrete else np.float32,
                                                                            copy=False)

    def _action_shape(self) -> tuple[int, ...]:
        return () if isinstance(self.action_space, spaces.Discrete) else tuple(self.action_space.shape or ())

    def _flat_action(self, action: torch.Tensor, lead: torch.Size) -> torch.Tensor:
        """Actions as the distributions take them: ``[*lead]`` (Discrete) or ``[*lead, size]``."""
        return flat_action(self.action_space, action, lead)

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
        hidden = None if hidden_state is None else member_axis(self.fit_hidden(hidden_state), add=True)
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

    # ------------------------------------------------------------------ learning (ppo_learning)
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
        return learn_members(group, batch, active)

    def _minibatches(self, buffer: RolloutBuffer) -> Iterator[Batch]:
        """One epoch of minibatches: flat rows, or BPTT sequences when recurrent."""
        return epoch_minibatches(self, buffer)

    def minibatch_of(self, batch: Batch) -> PPOMinibatch:
        """One of this agent's minibatches as the ``P = 1`` :class:`PPOMinibatch`: a flat batch's
        ``B`` rows all count; of a recurrent batch's ``L x B`` steps (replayed from their stored
        initial state) those in its ``loss_mask``."""
        return minibatch_of(self, batch)

    def compute_losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The PPO losses of one of this agent's minibatches under the current networks (the
        ``P = 1`` case of the group's losses): ``loss`` (the total to minimise), ``policy_loss``
        (clipped surrogate), ``value_loss``, ``entropy`` (mean), with gradients, and, without,
        ``approx_kl`` and ``clip_fraction``. Recurrent batches are weighted by their ``loss_mask``."""
        stats = minibatch_losses(self.solo_group(), self.minibatch_of(batch), graded_stats=True)[1][0]
        return {name: stats[index].detach() if name in ("approx_kl", "clip_fraction") else stats[index]
                for index, name in enumerate(LOSS_NAMES)}

    def evaluate_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Current ``log pi(a|s)``, entropy and ``V(s)`` of a minibatch's stored actions (under
        their stored action masks, if any), shaped like the batch, and its loss mask (None for
        flat batches; ``loss_mask`` ``[L, B]`` for recurrent ones)."""
        minibatch = self.minibatch_of(batch)
        dist, value = evaluate_minibatch(self.solo_group(), minibatch)
        lead = batch.old_log_probs.shape
        mask = batch.loss_mask if isinstance(batch, RecurrentBatch) else None
        return (dist.log_prob(minibatch.actions).reshape(lead), dist.entropy().reshape(lead), value.reshape(lead), mask)

    @staticmethod
    def _explained_variance(buffer: RolloutBuffer) -> float:
        """``1 - Var(R - V) / Var(R)`` over the valid rows of the rollout (nan when Var(R) = 0)."""
        return explained_variance(buffer)

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
