"""Queued work: the embedded job runner, the Celery app with its thin tasks (by id) and
beat, the schedule dispatcher, and the wiring the worker processes share (``runtime``)."""
