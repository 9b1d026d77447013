"""A test engine for tt: proves the whole host path (env, stages, events, signals, artifacts) without torch."""
