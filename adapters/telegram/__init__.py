"""Telegram: ``parse`` and ``render`` (pure), ``send`` (the outbound client over
python-telegram-bot's ``Bot``), ``inbound`` (the adapter: webhook or our own long
polling), ``setup`` (doctor, and the webhook commands)."""
