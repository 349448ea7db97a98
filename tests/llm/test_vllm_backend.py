"""The optional vLLM backend: the truncated importance weight, the adapter sync payload and the
engine protocol with a fake engine (CPU), clear errors without vLLM or CUDA, and a real-engine
test on a GPU with vllm installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from agile_llm import vllm_backend
from agile_llm.grpo import GRPO
from agile_llm.models import SharedBase
from agile_llm.rollout import PromptAnswerEnv, RolloutHarness
from agile_llm.tiny import PROMPT_TEMPLATE, answer_rows, build_model, build_tokenizer, digit_reward
from agile_llm.vllm_backend import (
    VLLMEngine,
    VLLMUnavailableError,
    adapter_payload,
    engine_for,
    truncated_is_weights,
)
from tests.llm.helpers import LORA

HAS_VLLM = importlib.util.find_spec("vllm") is not None
VLLM_USABLE = HAS_VLLM and torch.cuda.is_available()


# ---------------------------------------------------------------------- a fake vLLM
class FakeLogprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


class FakeLLM:
    """Records the engine arguments and every generate call; reads the synced adapter folder at
    generation time (as vLLM would) and answers each prompt with fixed tokens and log-probs."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.calls: list[dict[str, Any]] = []
        self.answer: list[int] = []
        self.logprob = -1.0

    def generate(self, prompts: list[dict[str, Any]], params: dict[str, Any], lora_request: Any,
                 use_tqdm: bool = False) -> list[Any]:
        from safetensors.torch import load_file

        folder = Path(lora_request.path)
        self.calls.append({"prompts": prompts, "params": params, "request": lora_request,
                           "tensors": load_file(str(folder / "adapter_model.safetensors")),
                           "config": json.loads((folder / "adapter_config.json").read_text())})
        tokens = self.answer[:params["max_tokens"]]
        sample = type("Sample", (), {"token_ids": list(tokens),
                                     "logprobs": [{t: FakeLogprob(self.logprob), 99: FakeLogprob(-9.0)} for t in tokens]})
        return [type("Output", (), {"outputs": [sample]}) for _ in prompts]


class FakeRequest:
    def __init__(self, name: str, lora_id: int, path: str) -> None:
        self.name, self.id, self.path = name, lora_id, path


def sampling_params(**kwargs: Any) -> dict[str, Any]:
    return kwargs


@pytest.fixture
def saved_base(tmp_path: Path) -> SharedBase:
    tokenizer = build_tokenizer()
    build_model(tokenizer).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return SharedBase.get(tmp_path / "model", LORA)


def fake_engine(base: SharedBase) -> VLLMEngine:
    return engine_for(base, {"gpu_memory_utilization": 0.5, "importance_sampling_cap": 2.0}, 32,
                      llm_factory=FakeLLM, sampling_params=sampling_params, lora_request=FakeRequest)


# ---------------------------------------------------------------------- math and payload
def test_truncated_importance_weight() -> None:
    trainer = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    sampler = torch.tensor([-1.0, -1.0, -3.0])
    weights = truncated_is_weights(trainer, sampler, cap=2.0)
    assert torch.allclose(weights, torch.tensor([1.0, float(torch.exp(torch.tensor(-1.0))), 2.0]))
    assert not weights.requires_grad  # a weight, not a path for gradients
    with pytest.raises(ValueError, match="importance_sampling_cap"):
        truncated_is_weights(trainer, sampler, cap=0.0)


def test_adapter_payload_is_exactly_the_members_lora_tensors() -> None:
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    first, second = (GRPO(model, tokenizer=tokenizer, lora_config=LORA, group_size=2, index=i) for i in range(2))
    with torch.no_grad():
        for i, param in enumerate(first.adapter.parameters()):
            param.fill_(0.01 * (i + 1))
    config, tensors = adapter_payload(first.base, first.adapter_name)
    assert tensors and all("lora_" in key for key in tensors)
    assert not any(first.adapter_name in key or second.adapter_name in key for key in tensors)
    assert len(tensors) == len(first.adapter.state_dict())  # one member's adapter, nothing of the base
    mine = sorted(float(v.flatten()[0]) for v in first.adapter.state_dict().values())
    assert sorted(float(v.flatten()[0]) for v in tensors.values()) == pytest.approx(mine)
    assert config["r"] == LORA["lora_r"] and config["lora_alpha"] == LORA["lora_alpha"]
    assert sorted(config["target_modules"]) == sorted(LORA["target_modules"])
    json.dumps(config)  # plain JSON


# ---------------------------------------------------------------------- the engine protocol (fake)
def test_one_engine_per_base_and_a_fresh_request_per_sync(saved_base: SharedBase) -> None:
    engine = fake_engine(saved_base)
    assert engine_for(saved_base, {}, 32) is engine  # the population shares it
    assert engine.llm.kwargs["enable_lora"] is True and engine.llm.kwargs["model"] == saved_base.path
    assert engine.llm.kwargs["max_lora_rank"] == 8 and engine.llm.kwargs["gpu_memory_utilization"] == 0.5
    agent = GRPO(saved_base, group_size=2)
    first = engine.sync(agent.adapter_name)
    second = engine.sync(agent.adapter_name)
    assert second.id > first.id and second.path != first.path
    assert not Path(first.path).exists() and Path(second.path, "adapter_model.safetensors").is_file()


def test_rollouts_through_the_engine_carry_its_logprobs_into_the_loss(saved_base: SharedBase,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_backend, "require_vllm", lambda: None)
    engine = fake_engine(saved_base)
    tok = saved_base.tokenizer
    engine.llm.answer = [*tok.encode(" 3", add_special_tokens=False), tok.eos_token_id]
    agent = GRPO(saved_base, group_size=2, batch_size=1, max_new_tokens=4, max_length=32, use_vllm=True,
                 vllm_config={"importance_sampling_cap": 1.5})
    with torch.no_grad():
        next(iter(agent.adapter.parameters())).add_(0.5)
    env = lambda: RolloutHarness(PromptAnswerEnv(answer_rows(), digit_reward, prompt_template=PROMPT_TEMPLATE),  # noqa: E731
                                 tok, max_model_len=32)
    episodes = agent.collect(env, [4])
    call = engine.llm.calls[-1]
    assert call["params"]["temperature"] == 1.0 and call["params"]["logprobs"] == 0
    assert call["params"]["stop_token_ids"] == [tok.eos_token_id]
    _, expected = adapter_payload(saved_base, agent.adapter_name)  # the synced adapter is the member's now
    assert set(call["tensors"]) == set(expected)
    assert all(torch.equal(call["tensors"][k], expected[k]) for k in expected)
    for episode in episodes:
        assert episode.sample_logprobs is not None and len(episode.sample_logprobs) == len(episode.ids)
        assert [lp for lp, m in zip(episode.sample_logprobs, episode.mask, strict=True) if m] == [-1.0] * 2
    batch = agent.rollout_batch(episodes)
    on = batch.mask.bool()
    assert torch.allclose(batch.weights[on], torch.exp(batch.old[on] + 1.0).clamp(max=1.5))
    assert torch.equal(batch.weights[~on], torch.ones_like(batch.weights[~on]))
    assert set(agent.learn(episodes)) == {"loss", "kl", "reward"}
    agent.evaluate_reward(env, episodes=2)
    assert engine.llm.calls[-1]["params"]["temperature"] == 0.0  # greedy evaluation


def test_an_in_memory_base_is_refused_for_vllm() -> None:
    tokenizer = build_tokenizer()
    base = SharedBase(build_model(tokenizer), tokenizer, LORA)
    with pytest.raises(VLLMUnavailableError, match="pretrained_model_name_or_path"):
        VLLMEngine(base, {}, max_model_len=32, llm_factory=FakeLLM, sampling_params=sampling_params,
                   lora_request=FakeRequest)


# ---------------------------------------------------------------------- without vLLM / CUDA
def test_import_agile_llm_does_not_import_vllm() -> None:
    code = ("import sys, agile_llm; agile_llm.GRPO; agile_llm.LLMPPO; agile_llm.LLMREINFORCE; "
            "import agile_llm.vllm_backend; assert 'vllm' not in sys.modules, 'vllm imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(VLLM_USABLE, reason="vLLM and CUDA are available here")
def test_use_vllm_without_vllm_or_cuda_names_the_field_and_the_extra() -> None:
    tokenizer = build_tokenizer()
    with pytest.raises(VLLMUnavailableError, match=r"algorithm\.use_vllm") as error:
        GRPO(build_model(tokenizer), tokenizer=tokenizer, lora_config=LORA, use_vllm=True)
    assert "agile-llm[vllm]" in str(error.value)


@pytest.mark.skipif(VLLM_USABLE, reason="vLLM and CUDA are available here")
def test_manifest_with_use_vllm_fails_on_that_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agile_cli.main import main
    from agile_llm.tiny import write_tiny
    from tests.llm.test_grpo import register_rollout

    register_rollout()
    write_tiny(tmp_path / "tiny")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "algorithm: {name: LLMREINFORCE, use_vllm: true, max_new_tokens: 3, max_length: 32}\n"
        "environment: {dataset: tiny/rollout.jsonl, reward_file_path: agile_llm.tiny, reward_fn_name: digit_reward}\n"
        "network: {pretrained_model_name_or_path: tiny/model}\n"
        "training: {max_steps: 1, evo_steps: 1, pop_size: 1}\n")
    assert main(["train", str(manifest), "--run-dir", str(tmp_path / "run"), "--quiet"]) != 0
    captured = capsys.readouterr()
    assert "use_vllm" in captured.out + captured.err and "agile-llm[vllm]" in captured.out + captured.err


# ---------------------------------------------------------------------- real vLLM (GPU)
MISSING = ", ".join(([] if torch.cuda.is_available() else ["no CUDA GPU"]) +
                    ([] if HAS_VLLM else ["vllm not installed (pip install 'agile-llm[vllm]')"]))


@pytest.mark.gpu
@pytest.mark.skipif(not VLLM_USABLE, reason=f"needs a CUDA GPU and vllm: {MISSING}")
def test_real_vllm_rollouts_match_the_trainer(tmp_path: Path) -> None:
    tokenizer = build_tokenizer()
    build_model(tokenizer, hidden_size=256, num_heads=4).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    agent = GRPO(str(tmp_path / "model"), lora_config=LORA, group_size=4, batch_size=2, max_new_tokens=3,
                 max_length=32, use_vllm=True, device="cuda",
                 vllm_config={"gpu_memory_utilization": 0.2, "enforce_eager": True})
    env = lambda: RolloutHarness(PromptAnswerEnv(answer_rows(), digit_reward, prompt_template=PROMPT_TEMPLATE),  # noqa: E731
                                 agent.tokenizer, max_model_len=32)
    episodes = agent.collect(env, [1, 2])
    batch = agent.rollout_batch(episodes)
    on = batch.mask.bool()
    assert on.any() and torch.allclose(batch.weights[on], torch.ones_like(batch.weights[on]), atol=0.05)
    agent.learn(episodes)
    second = agent.collect(env, [3])  # synced again after the update
    assert all(e.sample_logprobs is not None for e in second)
