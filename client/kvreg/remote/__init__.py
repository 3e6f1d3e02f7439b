"""HTTP client of the registry API (push, pull). Filled in with the registry."""
