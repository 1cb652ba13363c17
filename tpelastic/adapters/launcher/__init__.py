"""The launcher: ``LaunchConfig`` (validated) and the functions that run one agent with it.

``config`` holds the value, ``checks`` the up-front checks of the world (ports), ``launch``
``launch_agent``/``elastic_launch``. The command line (``tpelastic run``) builds a
``LaunchConfig`` and calls ``run_agent``. See docs/launcher.md.
"""
