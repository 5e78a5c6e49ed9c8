"""pytest configuration: the tests import their helpers from this folder; `isa` is a shared fixture."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from helpers import isa  # noqa: E402,F401  (a fixture, shared by every test module)
