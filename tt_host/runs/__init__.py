"""Runs: drive one (pipeline), its folder, state and plan, stage invocation and results, progress and observers;
what a run did is told by tt_host.reports."""
