"""Slack: ``parse`` and ``render`` (pure), ``send`` (the outbound client), ``inbound``
(the adapter: Events API and Socket Mode through slack-bolt), ``setup`` (doctor)."""
