"""The config service: a FastAPI app that answers lookups and takes uploads over HTTP."""
