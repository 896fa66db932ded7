"""Tools the model may call during a turn (docs/architecture.md, "Tools"): the registry (bot/tools/registry.py),
the built-in tools (bot/tools/builtin.py) and the bounded loop that runs them (bot/tools/loop.py)."""
