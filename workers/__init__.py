"""The queued half: the Celery app, thin tasks by id, the schedule dispatcher (issue #4).

Empty in this build: no queued work exists yet, and the layer contract already places it
between the gateway and the adapters.
"""
