"""Tools the model may call: the Tool type, the registry of factories, and the built-ins."""
