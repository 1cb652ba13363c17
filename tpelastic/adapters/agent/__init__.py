"""The agent: one per node; forms the world through a rendezvous and runs the local workers.

``spec`` holds the values (``WorkerSpec``, ``RunResult``), ``env`` the workers' environment,
``membership`` the bridge from a rendezvous handler to the rounds the agent machine consumes,
``loop`` the run loop (``SimpleElasticAgent``) and ``local`` the process-backed agent
(``LocalElasticAgent``). See docs/launcher.md.
"""
