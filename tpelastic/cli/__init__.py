"""The ``tpelastic`` command line: argv in, a config handed on, nothing more."""
