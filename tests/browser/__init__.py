"""The web UI in a real browser: Debian's chromium driven by Playwright against a seeded ``kvreg serve``."""
