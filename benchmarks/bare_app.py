"""The baseline of benchmarks/service_load.py: FastAPI returning a constant, served by uvicorn
with the same settings as `octune serve`."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/constant")
async def constant() -> dict[str, str]:
    return {"match": "exact"}
