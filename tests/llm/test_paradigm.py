"""The LLM dataset paradigm: light import, registration, manifests, `agile train` end to end."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.helpers import register

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [ROOT / "configs" / "training" / "sft_tiny.yaml", ROOT / "configs" / "training" / "dpo_tiny.yaml"]


def test_import_is_light() -> None:
    code = ("import sys, agile_llm, agile_llm.plugin; "
            "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_examples_validate_and_sections_are_documented() -> None:
    register()
    from agile_core.specs.manifest import TrainingManifest
    from agile_llm.specs import (
        DPOSpec,
        FinetuningNetworkSpec,
        LLMDatasetEnvSpec,
        LoraConfigSpec,
        SFTSpec,
    )

    for path in EXAMPLES:
        manifest = TrainingManifest.get_validated(path)
        assert isinstance(manifest.network, FinetuningNetworkSpec)
        assert isinstance(manifest.environment, LLMDatasetEnvSpec)
    for spec in (DPOSpec, SFTSpec, FinetuningNetworkSpec, LLMDatasetEnvSpec, LoraConfigSpec):
        assert all(info.description for info in spec.model_fields.values()), spec.__name__


def test_network_spec_defaults() -> None:
    """The defaults the manifest reference documents for the LLM `network` section."""
    from pydantic import ValidationError

    from agile_llm.specs import FinetuningNetworkSpec

    spec = FinetuningNetworkSpec(pretrained_model_name_or_path="m")
    assert (spec.max_context_length, spec.dtype) == (None, "float32")
    lora = spec.lora_config
    assert (lora.lora_r, lora.lora_alpha, lora.target_modules, lora.lora_dropout, lora.task_type) == (
        16, 32, None, 0.05, "CAUSAL_LM")
    spec = FinetuningNetworkSpec.model_validate({
        "pretrained_model_name_or_path": "m", "max_context_length": 512, "dtype": "bfloat16",
        "lora_config": {"lora_r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}})
    assert (spec.lora_config.lora_r, spec.lora_config.lora_alpha, spec.dtype) == (8, 16, "bfloat16")
    with pytest.raises(ValidationError):
        FinetuningNetworkSpec(pretrained_model_name_or_path="")


def test_manifest_reference_documents_the_registered_network_spec() -> None:
    register()
    from agile_core.reference import manifest_reference_markdown

    text = manifest_reference_markdown()
    network = text[text.index("## `network`"):text.index("## `environment")]
    lora = network[network.index("### `LoraConfigSpec`"):]
    assert "### `FinetuningNetworkSpec`" in network and "| `dtype` |" in network
    assert "| `lora_alpha` | int | `32` |" in lora and "| `lora_r` | int | `16` |" in lora


@pytest.mark.parametrize(("override", "where"), [
    ({"environment": {"dataset": "x.jsonl", "prompt_template": "Q:"}}, "prompt_template"),
    ({"network": {"pretrained_model_name_or_path": "m", "lora_config": {"rank": 4}}}, "rank"),
    ({"algorithm": {"name": "DPO", "beta": -1}}, "beta"),
])
def test_bad_fields_are_reported_with_their_path(override: dict, where: str) -> None:
    register()
    from pydantic import ValidationError

    from agile_core.errors import ManifestError
    from agile_core.specs.manifest import TrainingManifest

    data = {"algorithm": {"name": "SFT"}, "environment": {"dataset": "x.jsonl"},
            "network": {"pretrained_model_name_or_path": "m"}}
    data.update(override)
    with pytest.raises((ManifestError, ValidationError), match=where):
        TrainingManifest.get_validated(data)


def test_agile_train_runs_the_examples(tmp_path: Path) -> None:
    register()
    from agile_cli.main import main
    from agile_llm.tiny import write_tiny

    tiny_dir = write_tiny(tmp_path / "llm" / "tiny")
    for example in EXAMPLES:
        shutil.copy(example, tmp_path / "training.yaml")
        (tmp_path / "training.yaml").write_text(
            example.read_text().replace("../llm/tiny", str(tiny_dir)))
        run_dir = tmp_path / example.stem
        argv = ["train", str(tmp_path / "training.yaml"), "--run-dir", str(run_dir), "--quiet",
                "--set", "training.max_steps=4", "--set", "training.evo_steps=2", "--checkpoint-steps", "2"]
        assert main(argv) == 0
        assert (run_dir / "summary.json").is_file()
        checkpoints = sorted((run_dir / "checkpoints").glob("checkpoint_*"))
        assert checkpoints
        assert main([*argv, "--run-dir", str(run_dir) + "-resumed", "--resume-from-checkpoint",
                     str(checkpoints[0])]) == 0


@pytest.mark.parametrize("loop", ["training:train_llm_dataset", "rollout_training:train_llm_rollout"])
def test_loop_docstring_documents_every_parameter_once(loop: str) -> None:
    import importlib
    import inspect
    import re

    module, name = loop.split(":")
    function = getattr(importlib.import_module(f"agile_llm.{module}"), name)
    entries = re.findall(r"^    (\w+(?:, \w+)*): ", inspect.getdoc(function) or "", flags=re.MULTILINE)
    documented = [parameter for entry in entries for parameter in entry.split(", ")]
    assert sorted(documented) == sorted(inspect.signature(function).parameters)
    assert "Run options" in (function.__doc__ or "")
