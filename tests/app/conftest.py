"""Fixtures for the use-case tests: the engine tests' tiny models, isolated store and trusted key."""

from __future__ import annotations

from engine.conftest import TEXT, gemma3, gemma3_dir, home, key, llama, llama_dir

__all__ = ["TEXT", "gemma3", "gemma3_dir", "home", "key", "llama", "llama_dir"]
