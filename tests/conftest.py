"""Shared fixtures. Loopback fakes live in tests/fakes/; nothing here reaches the network."""

pytest_plugins = ["tests.fakes.model_server"]
