"""`python -m agile.train MANIFEST [options]`: the same as `agile train`.

Launched as several processes (``accelerate launch --num_processes N``, ``torchrun``: the
``WORLD_SIZE`` environment variable is above 1) it refuses to start, since data-parallel
training is not supported yet and every process would train and write the same run on its own;
see docs/distributed.md.
"""

import os
import sys

from agile_cli.main import main


def _world_size() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


if __name__ == "__main__":
    if _world_size() > 1:
        print(f"agile.train: started as {_world_size()} processes (WORLD_SIZE), but data-parallel training with "
              "Accelerate is not supported yet: start one process, or spread the population with "
              "--backend ray (docs/distributed.md)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(["train", *sys.argv[1:]]))
