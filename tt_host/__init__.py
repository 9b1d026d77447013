"""tt host: behavior specs, engine plugins, engine environments, runs and the `tt` command.

The host never imports torch; heavy code lives in engine environments.
"""

__version__ = "0.1.0"

# The plugin API this host offers. A plugin declares the major version it was
# written for (Engine.host_api); a different major is refused.
HOST_API_VERSION = "1.4"
