"""The registry's HTTP API, one module per resource; ``kvreg.remote.http.RegistryClient`` combines them."""
