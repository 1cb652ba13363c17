"""``python -m tpelastic``: the same as the ``tpelastic`` command."""

import sys

from tpelastic.cli.main import main

sys.exit(main())
