"""pytest configuration: the tests import their helpers from this folder; `isa` is a shared fixture."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from hypothesis import settings  # noqa: E402

from helpers import isa  # noqa: E402,F401  (a fixture, shared by every test module)

# CI runs the same examples every time; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")
