"""Write the tiny offline model, tokenizer and datasets the LLM examples use.

    python configs/llm/make_tiny.py            # -> configs/llm/tiny/{model/, sft.jsonl, dpo.jsonl}
    python configs/llm/make_tiny.py OUT_DIR

The model is a 2-layer Llama-style causal LM (hidden size 64, about 120k parameters) with random
weights and a byte-level BPE tokenizer trained in-process; the task maps number words to digits
("two seven" -> "2 7"; DPO pairs reject answers with a wrong first digit). Nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agile_llm.tiny import write_tiny


def main(argv: list[str] | None = None) -> int:
    """Write the files; the output folder is the first argument (default: next to this script)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).resolve().parent / "tiny"
    print(f"wrote {write_tiny(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
