"""``python -m tpelastic.run``: the same as ``tpelastic run`` (torchrun-compatible flags)."""

import sys

from tpelastic.cli.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
