"""Loaded by processes the tests start (PYTHONPATH points here): guard their sockets too."""

from tests.fakes.netguard import install

install()
