"""The cost model trains off the request path (``BackgroundModelAnswers``): a device never
trained answers from its tuned workloads until its model is ready, an upload keeps the previous
model's answers until the retrained one is ready, and only the device whose measurements
changed is retrained. Synchronisation is the model's own ``wait()`` hook, never a sleep.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from helpers.server_testing import Seeder, make_client, post_upload

from octune.api.client import session_uploads
from octune.db.server_store import ServerStore
from octune.kernels.gemm import gemm_query, gemm_workload
from octune.lookup import predictor
from octune.lookup.predictor import DeviceModel, ModelAnswers, train
from octune.lookup.semantics import KernelIndex
from octune.lookup.tables import StoreLookup

#: Two tuned corners (the model needs two workloads and 20 passing measurements) ...
TUNED = [gemm_workload(16, 16, 256), gemm_workload(4096, 4096, 256)]
ROWS = [37 * i for i in range(12)]
#: ... and a shape further than NEAR_OCTAVES from both: only a model's answer is "predicted".
FAR = {"m": 256, "n": 256, "k": 256}


def far_answer(client, device: str) -> dict:
    response = client.get("/v1/lookup", params={"kernel": "gemm", "device": device, **FAR})
    assert response.status_code == 200, response.text
    return response.json()


def trained_answer(store: ServerStore, device: str) -> dict:
    """What a model trained in the foreground on the database as it is now answers live."""
    answers = ModelAnswers()
    lookup = StoreLookup(store, model=answers)
    found = lookup.device(device)
    table = lookup.index(found, "gemm").table
    return (
        KernelIndex(table, answers.model(store, found, table)).lookup(gemm_query(**FAR)).to_dict()
    )


def test_an_untrained_device_answers_from_its_tuned_workloads_until_the_model_is_ready(
    store, seeder: Seeder, device_info
):
    for workload in TUNED:
        seeder.session(workload, ROWS)
    fp = device_info.fingerprint
    with make_client(store, cache_check_s=0.0) as client:
        models = client.app.state.lookups.model
        assert far_answer(client, fp)["match"] == "nearest"  # no waiting for the training
        models.wait()
        assert client.get("/v1/ready").json()["models_training"] == 0
        answer = far_answer(client, fp)
    assert answer["match"] == "predicted"
    assert answer == trained_answer(store, fp)


def test_an_upload_retrains_only_its_device_and_the_old_model_answers_meanwhile(
    store, seeder: Seeder, device_info, other_device, gemm_kernel, gemm_table, write_token,
    tmp_path, monkeypatch,
):  # fmt: skip
    # "Meanwhile" must not depend on how fast a retraining is: the one after the upload waits
    # until the requests made meanwhile have been answered.
    meanwhile, released = threading.Event(), threading.Event()

    def train_when_released(*args: Any, **kwargs: Any) -> DeviceModel | None:
        if meanwhile.is_set():
            released.wait(timeout=60)
        return train(*args, **kwargs)

    monkeypatch.setattr(predictor, "train", train_when_released)
    other = Seeder(store, other_device, gemm_kernel, gemm_table)
    for workload in TUNED:
        seeder.session(workload, ROWS)
        other.session(workload, ROWS)
    fp, other_fp = device_info.fingerprint, other_device.fingerprint
    new = gemm_workload(16, 4096, 256)  # far from FAR too: FAR stays the model's to answer
    with ServerStore(f"sqlite:///{tmp_path / 'tuner.db'}") as tuner:
        (upload,) = session_uploads(
            tuner, Seeder(tuner, device_info, gemm_kernel, gemm_table).session(new, ROWS)
        )
    with make_client(store, cache_check_s=0.0) as client:
        models = client.app.state.lookups.model
        trained: list[str] = []
        models.subscribe(lambda device, _sha256, _answers, _live: trained.append(device))
        for device in (fp, other_fp):
            far_answer(client, device)
        models.wait()
        assert sorted(trained) == sorted([fp, other_fp])
        before = {device: far_answer(client, device) for device in (fp, other_fp)}
        assert {answer["match"] for answer in before.values()} == {"predicted"}

        meanwhile.set()
        assert post_upload(client, upload, write_token).json()["added"] == len(ROWS)
        shape = {key: new.shape[key] for key in ("m", "n", "k")}
        exact = client.get("/v1/lookup", params={"kernel": "gemm", "device": fp, **shape}).json()
        assert exact["match"] == "exact"  # the tables follow the upload at once
        assert far_answer(client, fp) == before[fp]  # the previous model, not a wait
        assert far_answer(client, other_fp) == before[other_fp]
        released.set()
        models.wait()
        after = {device: far_answer(client, device) for device in (fp, other_fp)}
    assert sorted(trained) == sorted([fp, other_fp, fp])  # the other device kept its model
    assert after[other_fp] == before[other_fp]
    assert after[fp] == trained_answer(store, fp) != before[fp]


def test_a_kernel_with_too_little_to_learn_from_is_not_followed_by_a_full_collection(
    store, seeder: Seeder, device_info
):
    """A table built queues a training for each kernel version of its family, and most have
    too little to learn from: none may end in a full collection, which walks every object of
    the process and stalls every thread (15 to 35 of them in one lookup test, 0.7 s each late
    in the test suite's long process: 64 s for a test that took 12 alone). The collector's
    automatic runs are held off meanwhile, so a full collection seen is one the trainer asked for.
    """
    seeder.session(TUNED[0], ROWS)  # one workload and 12 rows: too little to learn from
    full: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        name = threading.current_thread().name
        if phase == "start" and info["generation"] == 2 and name.startswith("octune-model"):
            full.append(name)

    thresholds = gc.get_threshold()
    gc.set_threshold(1 << 30)
    gc.callbacks.append(count)
    try:
        with make_client(store, cache_check_s=0.0) as client:
            assert far_answer(client, device_info.fingerprint)["match"] == "nearest"
            client.app.state.lookups.model.wait()
            trainer = [t.name for t in threading.enumerate() if t.name.startswith("octune-model")]
            assert trainer  # the trainings ran, on the trainer's thread
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
    assert full == []
