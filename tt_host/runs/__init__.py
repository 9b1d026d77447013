"""Runs: drive one (pipeline), its folder, state and plan, stage invocation and results, scoring, gate, report, progress and observers."""
