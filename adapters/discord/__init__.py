"""Discord: ``parse`` and ``render`` (pure, and discord.py's ``ui`` views), ``send`` (the
outbound client over REST), ``inbound`` (the adapter: discord.py's gateway connection),
``setup`` (doctor and the invite URL)."""
