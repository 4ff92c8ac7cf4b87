"""K3-mini trainer: a small Kimi-K3-architecture model trained on the KJV Bible."""
