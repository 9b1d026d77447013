"""Helpers for tests and benchmarks (tiny locally built base models)."""
