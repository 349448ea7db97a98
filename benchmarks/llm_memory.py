"""Memory of an LLM population sharing one frozen base: resident memory (RSS) of a population
of 4 versus 1 on a Llama-style model of about 58M parameters built from a config.

Each population size runs in a fresh process: build the model, build the population (one LoRA
adapter per member on the one base, r=16 on q/k/v/o), take one SFT learning step per member (so
gradients and Adam moments exist), then read the RSS. One JSON line per size, then the ratios:

    OMP_NUM_THREADS=1 uv run python benchmarks/llm_memory.py

``rss_ratio`` compares whole processes (Python, torch and the model included);
``model_ratio`` compares only what came after ``import torch, transformers, peft``
(``rss - rss_after_imports``): the model, adapters, optimizer states and activations.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys


def measure(pop_size: int, hidden: int, layers: int, vocab: int) -> dict[str, float]:
    """RSS (MiB) after imports and after one learning step of `pop_size` members."""
    import psutil
    import torch
    import transformers  # noqa: F401
    from peft import LoraConfig  # noqa: F401

    torch.set_num_threads(1)
    process = psutil.Process()
    after_imports = process.memory_info().rss / 2**20
    from agile_llm.data import DatasetEnv
    from agile_llm.sft import SFT
    from agile_llm.tiny import build_model, build_tokenizer, number_rows

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=hidden, num_layers=layers, intermediate_size=int(2.75 * hidden),
                        num_heads=8, vocab_size=vocab, init_std=0.02)
    params = sum(p.numel() for p in model.parameters())
    env = DatasetEnv(number_rows(), tokenizer, "sft", test_fraction=0.2)
    lora = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj",
                                                                                      "o_proj"]}
    pop = [SFT(model, tokenizer=tokenizer, lora_config=lora, batch_size=8, index=i, seed=i) for i in range(pop_size)]
    for agent in pop:
        agent.learn(env.sample(agent.batch_size, agent.rng))
    gc.collect()
    rss = process.memory_info().rss / 2**20
    adapter = sum(p.numel() for p in pop[0].adapter.parameters())
    return {"pop_size": pop_size, "base_parameters": params, "adapter_parameters": adapter,
            "rss_after_imports_mib": round(after_imports, 1), "rss_mib": round(rss, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run each population size in its own process; print JSON lines and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.child, args.hidden, args.layers, args.vocab)))
        return 0
    results = {}
    for size in (1, 4):
        out = subprocess.run([sys.executable, __file__, "--child", str(size), "--hidden", str(args.hidden),
                              "--layers", str(args.layers), "--vocab", str(args.vocab)],
                             capture_output=True, text=True, check=True)
        results[size] = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(results[size]))
    one, four = results[1], results[4]
    summary = {
        "rss_ratio": round(four["rss_mib"] / one["rss_mib"], 3),
        "model_ratio": round((four["rss_mib"] - four["rss_after_imports_mib"])
                             / (one["rss_mib"] - one["rss_after_imports_mib"]), 3),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
