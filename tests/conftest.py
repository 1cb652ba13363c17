"""Shared test settings: hypothesis profiles.

``dev`` is quick for the edit-test loop; ``ci`` (the default in scripts/test and CI) is more
thorough, derandomized so CI is stable, and still keeps the whole suite within about ten minutes on
two cores. ``nightly`` is for long hunts. Choose with HYPOTHESIS_PROFILE.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=30, stateful_step_count=25, deadline=None)
settings.register_profile(
    "ci",
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("nightly", max_examples=5000, stateful_step_count=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
