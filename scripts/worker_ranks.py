"""Jobs of poplar-worker on loopback, for the scripts (benchmarks, checks, the GPU runs):
a plan file, and one process per rank with torchrun's environment (docs/worker.md,
"What a rank does"). The C++ tests have their twin in tests/launcher/worker_harness.h.
"""
import json
import os
import socket
import subprocess
import time


def free_port():
    """A TCP port free on 127.0.0.1 now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_doc(stage, ranks, global_batch=None, shares=None):
    """A plan (docs/formats.md, poplar-plan/1): `ranks` holds each rank's micro-batches,
    `shares` (when given) each rank's state_share; the global batch is their sum unless
    given (a malformed plan may say otherwise)."""
    doc = {"format": "poplar-plan/1", "stage": stage,
           "global_batch": sum(map(sum, ranks)) if global_batch is None else global_batch,
           "ranks": [{"rank": r, "micro_batches": list(m)} for r, m in enumerate(ranks)]}
    for entry, share in zip(doc["ranks"], shares or []):
        entry["state_share"] = share
    return doc


def write_plan(path, stage, ranks, global_batch=None, shares=None):
    """Writes plan_doc(...) to `path`; returns `path`."""
    with open(path, "w") as f:
        json.dump(plan_doc(stage, ranks, global_batch, shares), f)
    return path


def start_ranks(commands, logs=None, omp_threads=None, quiet=False, env=None):
    """Starts one process per entry of `commands` (an argv each) as ranks 0.. of one job on
    a free loopback port. Each one's stdout and stderr go to logs[rank] (a path) when
    `logs` is given, else to this process's, stdout discarded when `quiet` (a script
    printing a table of its own). `omp_threads` sets OMP_NUM_THREADS (libtorch's CPU
    threads) where the ranks share few cores; `env` adds other variables. Returns the
    processes."""
    port, procs = free_port(), []
    for rank, command in enumerate(commands):
        variables = dict(os.environ, **(env or {}), RANK=str(rank), WORLD_SIZE=str(len(commands)),
                         LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if omp_threads is not None:
            variables["OMP_NUM_THREADS"] = str(omp_threads)
        if logs is None:
            procs.append(subprocess.Popen(command, env=variables, stdout=subprocess.DEVNULL if quiet else None))
        else:
            with open(logs[rank], "w") as log:
                procs.append(subprocess.Popen(command, env=variables, stdout=log, stderr=subprocess.STDOUT))
    return procs


def read_metrics(path):
    """The JSON lines a rank wrote with --metrics, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_ranks(procs, timeout=None):
    """The ranks' exit codes; with `timeout` (seconds, for all of them together) a rank
    still running then is killed and its code is None."""
    start, codes = time.time(), []
    for p in procs:
        try:
            codes.append(p.wait(timeout=None if timeout is None else max(0.1, timeout - (time.time() - start))))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return codes
