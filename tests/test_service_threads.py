"""Threads alive before a Recorder opens are named in the manifest when they ran meanwhile,
except the service threads whose code is known to run no torch op (tqdm's monitor, a Jupyter
kernel's I/O threads): those would put a caveat on every capture made after a progress bar or
in a notebook (capture/session/threads.py, SERVICE_THREADS)."""

from __future__ import annotations

import json
import threading
import time

import torch
from tqdm import tqdm
from tqdm._monitor import TMonitor

from spiketrace.capture import Recorder
from spiketrace.capture.session.threads import is_service, thread_code
from spiketrace.schemas import layout


def users_worker(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.005)


def test_a_progress_bar_monitor_is_left_out_and_a_users_thread_is_named(tmp_path):
    stop = threading.Event()
    worker = threading.Thread(target=users_worker, args=(stop,), name="users_worker", daemon=True)
    worker.start()
    monitor = TMonitor(tqdm, 0.005)  # tqdm's own wakes every 10 s; this one every 5 ms
    try:
        assert is_service(thread_code(monitor)) and not is_service(thread_code(worker))
        with Recorder(tmp_path / "t") as recorder:
            with recorder.stage("forward"):
                torch.ones(3).add(1)
            time.sleep(0.1)  # both threads wake about 20 times meanwhile
    finally:
        stop.set()
        monitor.exit()
        worker.join()
    entries = json.loads((tmp_path / "t" / layout.MANIFEST_NAME).read_text())["unrecorded_threads"]
    named = [(e["name"], e["code"]) for e in entries if e["name"] in ("users_worker", monitor.name)]
    assert named == [("users_worker", f"{__name__}.users_worker")], entries
