"""Hypothesis profiles: "ci" (the default) keeps the suite fast on 2 cores;
"thorough" (HYPOTHESIS_PROFILE=thorough) runs the property tests far longer."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=150,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=3000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
