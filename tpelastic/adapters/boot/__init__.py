"""A folder the agent puts first on its workers' ``PYTHONPATH`` to hook them at start-up.

Its ``sitecustomize`` installs the collective hook (:mod:`tpelastic.adapters.collectives`) when
``TPELASTIC_COLLECTIVES=1``, then runs the ``sitecustomize`` it hides, if there is one.
"""

import os

BOOT_DIR = os.path.dirname(os.path.abspath(__file__))
