"""Platform adapters: verify and parse inbound requests into events, render and send replies."""
