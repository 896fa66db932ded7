"""hilo: one assistant on Telegram, WhatsApp and the web, with one memory per person."""

__version__ = "0.1.0"
