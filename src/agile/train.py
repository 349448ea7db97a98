"""`python -m agile.train MANIFEST [options]`: the same as `agile train`.

Launched as several processes (``accelerate launch --num_processes N -m agile.train MANIFEST``,
or ``torchrun``), it trains data-parallel: every process steps its own environments, gradients
are averaged over the processes, and the main process evolves the population and writes the run
directory (docs/distributed.md).
"""



import sys

from agile_cli.main import run

if __name__ == "__main__":
    run(["train", *sys.argv[1:]])
