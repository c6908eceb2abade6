"""Benchmarks: each measures a goal as a ratio against a baseline taken in the same run."""
