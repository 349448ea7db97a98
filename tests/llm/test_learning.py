"""Learning tests (seeded, CPU, tiny models built here): SFT and DPO populations of 2 with
tournament selection and learning-rate mutation on the number-words task."""

from __future__ import annotations

import numpy as np
import pytest

from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_llm.algorithm import generate_greedy
from agile_llm.data import DatasetEnv
from agile_llm.dpo import DPO
from agile_llm.sft import SFT
from agile_llm.tiny import PROMPT_TEMPLATE, number_rows, preference_rows
from agile_llm.training import train_llm_dataset
from tests.llm.helpers import LORA, tiny
from tests.seeds import learning_seed

pytestmark = pytest.mark.learning


def _evolution(pop_size: int) -> dict:
    return {"selection_strategy": TournamentSelection(2, True, pop_size, rng=learning_seed()),
            "mutation": Mutations(no_mutation=0.5, architecture=0.0, new_layer_prob=0.0, parameters=0.0,
                                  activation=0.0, rl_hp=0.5, rand_seed=learning_seed())}


def test_sft_population_learns_the_task_and_generalises() -> None:
    model, tokenizer = tiny()
    env = DatasetEnv(number_rows(), tokenizer, "sft", prompt_template=PROMPT_TEMPLATE, test_fraction=0.2)
    hp = HyperparameterConfig(lr=RLParameter(name="lr", min=3e-3, max=3e-2))
    pop = [SFT(model, tokenizer=tokenizer, lora_config=LORA, lr=1e-2, batch_size=16, max_length=32,
               hp_config=hp, index=i, seed=10 * learning_seed() + i) for i in range(2)]
    before = pop[0].evaluate_loss(env)
    pop, fitnesses = train_llm_dataset(pop, env, evo_steps=50, max_steps=300, verbose=False, seed=learning_seed(),
                                       **_evolution(2))
    best = pop[int(np.argmax(fitnesses))]
    after = best.evaluate_loss(env)
    prompts = [env.encode_prompt(env.prompt_text(row)) for row in env.test_rows]
    completions = generate_greedy(best, prompts, max_new_tokens=6)
    accuracy = np.mean([c.strip() == row["response"] for c, row in zip(completions, env.test_rows, strict=True)])
    print(f"SFT test loss {before:.3f} -> {after:.3f}; greedy match on held-out prompts {accuracy:.2f}")
    assert after <= 0.5 * before
    assert accuracy >= 0.8
    assert any(agent.lineage.parent_id is not None for agent in pop)  # selection cloned members


def test_dpo_population_learns_held_out_preferences() -> None:
    model, tokenizer = tiny()
    env = DatasetEnv(preference_rows(), tokenizer, "dpo", prompt_template=PROMPT_TEMPLATE, test_fraction=0.2)
    hp = HyperparameterConfig(lr=RLParameter(name="lr", min=1e-3, max=2e-2))
    pop = [DPO(model, tokenizer=tokenizer, lora_config=LORA, lr=5e-3, batch_size=16, max_length=32, beta=0.1,
               nll_alpha=1.0, hp_config=hp, index=i, seed=10 * learning_seed() + i) for i in range(2)]
    start = pop[0].evaluate_preferences(env)[0]
    pop, fitnesses = train_llm_dataset(pop, env, evo_steps=60, max_steps=240, verbose=False, seed=learning_seed(),
                                       **_evolution(2))
    best = pop[int(np.argmax(fitnesses))]
    accuracy, margin = best.evaluate_preferences(env)
    print(f"DPO held-out preference accuracy {start:.2f} -> {accuracy:.2f} (mean margin {margin:.3f})")
    assert start == pytest.approx(0.5, abs=0.1)
    assert accuracy >= 0.8 and margin > 0
