"""What a job tunes: a built-in network or a list of workloads, as the server stores it and
checks it on submission, and as agents read it.

Jobs carry workloads generically, in the workloads file's own form, so that the server, the
agents and `octune tune --workloads` read them alike and no kernel family is named here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from octune.core.errors import OctuneError
from octune.tuner.campaign import Task, tasks_from


def check_spec(spec: Mapping[str, Any]) -> None:
    """Refuse, in one line, a job no agent could run: an unknown network, a workload no
    kernel takes. Networks are checked by name only: building one takes seconds.
    """
    if "model" in spec:
        from octune.networks.builtin import BUILTIN, did_you_mean

        if spec["model"] not in BUILTIN:
            raise OctuneError(
                f"unknown model '{spec['model']}': {did_you_mean(spec['model'])}a job tunes a "
                f"built-in network ({', '.join(BUILTIN)}); for an ONNX file, write its layers "
                "with `octune workloads from-onnx FILE --out layers.yaml` and submit --workloads"
            )
    else:
        tasks_from({"workloads": spec["workloads"]}, "workloads")


def spec_tasks(spec: Mapping[str, Any]) -> list[Task]:
    """The tuning tasks of a job, as `octune tune --model` or `--workloads` makes them."""
    if "model" in spec:
        from octune.networks.workloads import network_layers, network_tasks

        layers, _untuned = network_layers(spec["model"], spec.get("batch"), {})
        return network_tasks(layers)
    return tasks_from({"workloads": spec["workloads"]}, "the job's workloads")


def spec_label(spec: Mapping[str, Any]) -> str:
    if "model" in spec:
        batch = spec.get("batch")
        return spec["model"] + (f" (batch {batch})" if batch else "")
    count = len(spec["workloads"])
    return f"{count} workload{'s' if count != 1 else ''}"
