"""``python -m tpelastic.run``: the same as ``tpelastic run`` (torchrun-compatible flags)."""

import sys

if __name__ == "__main__":
    import gc

    # Run as a program: no garbage collection while the agent imports its modules (imports
    # make no garbage, but many objects that each collection would walk again); ``main``
    # freezes them and turns the collector back on before the job starts.
    gc.disable()

from tpelastic.cli.main import finish
from tpelastic.cli.run import main

if __name__ == "__main__":
    sys.exit(finish(main(sys.argv[1:])))
