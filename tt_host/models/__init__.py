"""Models: the registry, model references, activation, export and `tt serve`."""
