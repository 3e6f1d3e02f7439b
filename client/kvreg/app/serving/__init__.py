"""``kvreg engine serve``: an OpenAI-compatible inference server whose prompt cache is the registry.

- :mod:`.protocol`: the OpenAI request bodies, the error object, the response and chunk shapes;
- :mod:`.textstream`: completion tokens to text, incrementally, with stop strings;
- :mod:`.host`: the one loaded model and the single worker thread in front of it, where each
  request goes through :func:`kvreg.app.ask.ask` (route, graft or fall back, decode);
- :mod:`.server`: the FastAPI application and the ``serve`` use case (uvicorn).

The engine (torch) is imported only once the model is loaded, by :mod:`.host`.
"""
