"""Behavior specs: the neutral schema, loading with engine extensions, and the instruction compiler."""
