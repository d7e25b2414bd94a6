"""Load-test `octune serve` with wrk beside a bare FastAPI endpoint, in the same run.

    python benchmarks/service_db.py sqlite:////tmp/octune-1m.db      # 1,000,000 measurements
    python benchmarks/service_load.py sqlite:////tmp/octune-1m.db [--seconds 10]

Scenarios: the bare constant endpoint; single lookups that hit exact tuned workloads (wrk
rotates over 250 of them); single lookups of untuned shapes (the live model answers); a batch
of 50 workloads per request, the same body each time (as a runtime repeats its batch) and a new body
each time (the same workloads, whitespace varied: validated anew). Each server is one uvicorn
process (uvloop, httptools, no access log); wrk runs on the same machine, so server and load
generator share its cores. The first lookup starts the device's cost model training in the
background: exact hits are measured once while it trains, the scenarios after it finished
(``models_training`` of GET /v1/ready).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
from sqlalchemy import create_engine, select

from octune.db.models import Device, TuningSession, WorkloadRow

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], probe: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            httpx.get(probe, timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{command} did not start")


def lua(paths: list[str], body: str | None, unique: bool = False) -> str:
    """A wrk script rotating over paths (GET), or posting one JSON body; ``unique``: each
    request's body made new by trailing whitespace (the request count in binary, as spaces
    and tabs), so the server cannot reuse its validation of an earlier one.
    """
    if body is not None:
        post = (
            f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
        )
        if unique:
            post += (
                "count = 0\nrequest = function()\n  count = count + 1\n"
                "  local pad, n = {}, count\n  for b = 1, 24 do\n"
                '    pad[b] = (n % 2 == 1) and "\\t" or " "\n    n = math.floor(n / 2)\n  end\n'
                "  return wrk.format(nil, nil, nil, wrk.body .. table.concat(pad))\nend\n"
            )
        return post
    listed = ",\n".join(json.dumps(p) for p in paths)
    return (
        f"paths = {{{listed}}}\ni = 0\nrequest = function()\n  i = i % #paths + 1\n"
        '  return wrk.format("GET", paths[i])\nend\n'
    )


def wrk(url: str, script: str, seconds: int, connections: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", file.name, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    Path(file.name).unlink()

    def ms(label: str) -> float:
        value, unit = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": ms("50%"),
        "p99": ms("99%"),
        "errors": float(errors.group(1)) if errors else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, nargs="+", default=[4, 16])
    args = parser.parse_args()

    engine = create_engine(args.url)
    with engine.connect() as connection:
        device = connection.execute(select(Device.fingerprint).order_by(Device.id)).first()[0]
        shapes = (
            connection.execute(
                select(WorkloadRow.shape)
                .join(TuningSession, TuningSession.workload_id == WorkloadRow.id)
                .join(Device, TuningSession.device_id == Device.id)
                .where(Device.fingerprint == device)
                .order_by(WorkloadRow.id)
            )
            .scalars()
            .all()
        )
    engine.dispose()

    def query(shape: dict[str, int]) -> str:
        params = {
            "device": device,
            "kernel": "gemm",
            **{k: shape[k] for k in ("m", "n", "k")},
            "transa": bool(shape["transa"]),
            "transb": bool(shape["transb"]),
        }
        return "/v1/lookup?" + urlencode({k: str(v).lower() for k, v in params.items()})

    exact = [query(shape) for shape in shapes]
    untuned = [query({**shape, "m": shape["m"] + 7, "k": shape["k"] + 3}) for shape in shapes]
    batch = json.dumps(
        {
            "device": device,
            "kernel": "gemm",
            "workloads": [
                {k: shape[k] for k in ("m", "n", "k", "transa", "transb")} for shape in shapes[:50]
            ],
        }
    )

    octune_port, bare_port = free_port(), free_port()
    python = sys.executable
    octune = start(
        [
            python,
            "-c",
            "from octune.cli import main; main()",
            "serve",
            "--db",
            args.url,
            "--port",
            str(octune_port),
            "--no-access-log",
        ],
        f"http://127.0.0.1:{octune_port}/v1/health",
    )
    bare = start(
        [
            python,
            "-m",
            "uvicorn",
            "--app-dir",
            str(HERE),
            "bare_app:app",
            "--port",
            str(bare_port),
            "--no-access-log",
            "--no-server-header",
            "--log-level",
            "warning",
        ],
        f"http://127.0.0.1:{bare_port}/constant",
    )
    try:
        base = f"http://127.0.0.1:{octune_port}"

        def warm() -> None:
            """Answer and cache every shape once."""
            for path in (*exact, *untuned):
                httpx.get(base + path, timeout=60).raise_for_status()
            httpx.post(
                base + "/v1/lookup/batch",
                content=batch,
                headers={"Content-Type": "application/json"},
                timeout=60,
            ).raise_for_status()

        began = time.perf_counter()
        first = httpx.get(base + exact[0], timeout=120)
        cold = time.perf_counter() - began
        assert first.json().get("match") == "exact", first.text
        print(f"first lookup (builds the device's table from the database): {cold * 1e3:.0f} ms")
        warm()
        during = wrk(base, lua(exact, None), args.seconds, args.connections[0])
        print(
            f"exact hits while the cost model trains ({args.connections[0]} connections): "
            f"{during['rps']:,.0f} req/s, p50 {during['p50']:.2f} ms, p99 {during['p99']:.2f} ms, "
            f"{during['errors']:.0f} non-2xx"
        )
        while httpx.get(base + "/v1/ready", timeout=60).json()["models_training"]:
            time.sleep(1)
        print(f"cost model trained in the background: {time.perf_counter() - began:.0f} s")
        warm()  # a trained model drops the cached answers
        scenarios = [
            ("bare FastAPI constant", f"http://127.0.0.1:{bare_port}", lua(["/constant"], None)),
            ("lookup, exact hit", base, lua(exact, None)),
            ("lookup, untuned shape (predicted)", base, lua(untuned, None)),
            ("batch lookup, 50 workloads", base + "/v1/lookup/batch", lua([], batch)),
            (
                "batch lookup, 50 workloads, every body new",
                base + "/v1/lookup/batch",
                lua([], batch, unique=True),
            ),
        ]
        print("| scenario | connections | req/s | p50 ms | p99 ms | non-2xx | vs bare |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for connections in args.connections:
            bare_rps = None
            for name, url, script in scenarios:
                result = wrk(url, script, args.seconds, connections)
                bare_rps = bare_rps or result["rps"]
                print(
                    f"| {name} | {connections} | {result['rps']:,.0f} | {result['p50']:.2f} | "
                    f"{result['p99']:.2f} | {result['errors']:.0f} | "
                    f"{result['rps'] / bare_rps:.0%} |",
                    flush=True,
                )
    finally:
        for process in (octune, bare):
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
