"""The `tt` command: one typer sub-app per noun, thin layers over tt_host."""
