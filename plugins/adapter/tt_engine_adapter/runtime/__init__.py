"""Runtime code of the adapter engine; imported only inside the engine environment."""
