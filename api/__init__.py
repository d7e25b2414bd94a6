"""The config service's HTTP API as its clients see it: the request and response schemas, the
httpx client, and what a farm job asks to tune. Below the server (``octune.server``) and the
clients above it (``octune.runtime``, ``octune.farm``, ``octune.cli``), so a client needs no
part of FastAPI's service.
"""
