"""Sweeps (`tt sweep`): settings searched with Optuna on a selection split carved from the training examples,
each trial an ordinary run (tt_host.runs), the held-out set scored once for the winner; the sweep's report is
told by tt_host.reports.sweep_report (docs/evaluation.md "Sweeps")."""
