"""`python -m agile.train MANIFEST [options]`: the same as `agile train`."""

import sys

from agile_cli.main import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
