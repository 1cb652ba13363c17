"""``python -m tpelastic.run``: the same as ``tpelastic run`` (torchrun-compatible flags)."""

import sys

from tpelastic.cli.main import finish
from tpelastic.cli.run import main

if __name__ == "__main__":
    sys.exit(finish(main(sys.argv[1:])))
