"""Suite files: schema, loading with located errors, and method resolution."""

from harness.spec.check import load_suite
from harness.spec.loader import Problem, SuiteError
from harness.spec.schema import Suite, TrialSettings

__all__ = ["Problem", "Suite", "SuiteError", "TrialSettings", "load_suite"]
