"""Nightly benchmarks: re-executed suite runs, regression detection, reports and scheduling."""
