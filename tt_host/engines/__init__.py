"""Engine environments and processes: hashed environments, runtime locks, uv, `tt engines install`, the scaffold, the stage runner."""
