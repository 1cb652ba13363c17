"""Start-up hook of tpelastic workers (see tpelastic.adapters.boot); never fails the worker."""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("TPELASTIC_COLLECTIVES") == "1":
    try:
        from tpelastic.adapters import collectives

        collectives.install()
    except Exception as error:  # the job runs without the hook rather than not at all
        print(f"tpelastic: collective hook not installed: {error}", file=sys.stderr)


def _chain() -> None:
    # Run the sitecustomize this one shadows (a virtualenv's, a distribution's), if any.
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
