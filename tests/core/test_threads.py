"""torch's thread count per training process: an explicit request, then AGILE_NUM_THREADS, then
the user's OMP/MKL variables, then one thread for RL-sized members and the cores for large ones."""

from __future__ import annotations

import pytest
import torch

from agile_core.threads import (
    LARGE_MEMBER_PARAMETERS,
    choose_threads,
    member_parameters,
    resolve_threads,
)


class Member:
    def __init__(self, *widths: int) -> None:
        self.actor = torch.nn.Sequential(*(torch.nn.Linear(w, w) for w in widths))
        self.actor_target = self.actor  # the same module twice counts once
        self.nets = {"critic": torch.nn.Linear(4, 2)}
        self.lr = 1e-3


@pytest.fixture
def no_thread_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGILE_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_the_largest_member_counts_and_shared_modules_once() -> None:
    assert member_parameters([Member(8), Member(8, 8)]) == 2 * (8 * 8 + 8) + (4 * 2 + 2)


def test_small_members_get_one_thread_and_large_ones_share_the_cores() -> None:
    assert choose_threads(100_000, cores=16) == 1
    assert choose_threads(LARGE_MEMBER_PARAMETERS, cores=16) == 16
    assert choose_threads(LARGE_MEMBER_PARAMETERS, processes=4, cores=16) == 4
    assert choose_threads(LARGE_MEMBER_PARAMETERS, processes=32, cores=16) == 1


def test_a_request_wins_then_agile_num_threads_then_the_users_openmp_variable(no_thread_variables: None,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    population = [Member(8)]
    assert resolve_threads(population, cores=8) == 1
    assert resolve_threads(population, requested=3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert resolve_threads(population) is None  # torch already took the user's choice
    monkeypatch.setenv("AGILE_NUM_THREADS", "5")
    assert resolve_threads(population) == 5
    assert resolve_threads(population, requested=2) == 2
    monkeypatch.setenv("AGILE_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="AGILE_NUM_THREADS must be a positive integer"):
        resolve_threads(population)


def test_training_without_thread_variables_uses_one_thread_for_a_small_dqn(no_thread_variables: None) -> None:
    from agile_core.trainer import LocalTrainer

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        trainer = LocalTrainer("DQN", "CartPole-v1", training={"max_steps": 64, "evo_steps": 64, "pop_size": 1})
        trainer.train(verbose=False)
        assert torch.get_num_threads() == 1
        trainer.train(verbose=False, threads=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
