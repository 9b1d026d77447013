"""Formats both sides of the adapter engine read (stdlib and tt_stagekit only): the host's plugin and
spec, and the stages and server in the engine environment."""
