import os

from hypothesis import settings

settings.register_profile("accounting", max_examples=15, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "accounting"))
