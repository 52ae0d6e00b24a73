"""The runtime: events, settings, the turn loop and its journal, context, the model port.

Imports nothing from the web framework, the queue or any platform SDK (import-linter checks).
"""
