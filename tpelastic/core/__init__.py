"""The pure core: deterministic state machines with no I/O.

Nothing under ``tpelastic.core`` touches sockets, files, processes, threads, clocks, randomness
or tensorplay; time and observations come in as arguments and decisions go out as values. The
import-linter contract in pyproject.toml checks this.
"""
