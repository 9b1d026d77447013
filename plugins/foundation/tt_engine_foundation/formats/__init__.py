"""Formats both sides of the foundation engine read (stdlib and tt_stagekit only): the host's plugin
and spec, and the stages in the engine environment."""
