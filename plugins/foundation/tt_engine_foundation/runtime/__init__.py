"""Runtime code of the foundation engine (torch, tokenizers); imported only inside the engine environment."""
