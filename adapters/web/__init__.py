"""The built-in web chat: ``parse``, ``auth`` and ``render`` (pure), ``send`` (delivery
is the stored row plus a wake-up of the page's stream), ``inbound`` (the adapter).

Its HTTP API and page are served by the gateway (``gateway.web``): unlike a platform's
webhook they read the conversation back from the store."""
