"""Loopback fakes of the external services tests talk to (model providers, ...). Each lives in its own module."""
