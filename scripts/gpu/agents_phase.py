"""The `agents` phase of scripts/gpu/gpu_runs.py: poplar's own path on a GPU node, as a
user runs it (docs/operations.md, "Running a cluster"), on one machine.

One poplar-agent on loopback with `gpus: auto` (the card found through NVML), then from
the head's side: `poplar status` (the agent's devices), `poplar profile` (the agent has
`poplar-worker profile --device cuda` measure the card), `poplar plan` from those
profiles, and `poplar launch` (the agent starts the rank on the card, NCCL, a held-out
loss). The GPU machine has no gRPC: poplar and poplar-agent come from the bundle of
scripts/gpu/prepare (.device/bundle), the worker from the call's own build. Writes
agents.json: what each command printed, the profile's stages, the plan and the launch's
summary.json. A dry run does the same on this machine with one emulated CPU device.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from step_traces import table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import local_cluster  # noqa: E402  (listening)
import worker_ranks  # noqa: E402  (free_port)
DEVICE_FILES = os.path.join(ROOT, ".device")
CREDENTIALS = os.path.join(DEVICE_FILES, "credentials")
COMMAND_TIMEOUT_S = 240  # each poplar command's; far more than the whole phase needs


def programs():
    """poplar and poplar-agent: the bundle's where scripts/gpu/prepare made one, else this
    machine's build (a dry run before prepare)."""
    bundle = os.path.join(DEVICE_FILES, "bundle", "bin")
    if os.path.exists(os.path.join(bundle, "poplar-agent")):
        return os.path.join(bundle, "poplar"), os.path.join(bundle, "poplar-agent")
    build = os.path.join(ROOT, os.environ.get("POPLAR_BUILD_DIR", "build"))
    return os.path.join(build, "planner", "poplar"), os.path.join(build, "agent", "poplar-agent")


def write_files(folder, setup, worker, port, train_data, held_out):
    """The agent file, the cluster file and the agent's work directory, in `folder`."""
    work = os.path.join(folder, "work")
    os.makedirs(work)
    shutil.copyfile(train_data, os.path.join(work, "train.bin"))
    shutil.copyfile(held_out, os.path.join(work, "eval.bin"))
    credentials = {name: os.path.join(CREDENTIALS, name) for name in
                   ("ca.pem", "nodes/gpu.pem", "nodes/gpu.key", "head.pem", "head.key", "token", "crl")}
    devices = ("gpus: none\nemulated:\n  - {type: " + setup.device_type +
               ", count: 1, threads: 2, slowdown: 1.0, memory_mib: 256}\n") if setup.dry_run else "gpus: auto\n"
    with open(os.path.join(folder, "agent.yaml"), "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\n"
                f"credentials: {{ca: {credentials['ca.pem']}, cert: {credentials['nodes/gpu.pem']}, "
                f"key: {credentials['nodes/gpu.key']}, token: {credentials['token']}, crl: {credentials['crl']}}}\n"
                f"work_dir: {work}\ncache_dir: {os.path.join(folder, 'cache')}\nworker: {worker}\n" + devices)
    model = os.path.join(ROOT, "configs", "models", "gpt-tiny.json" if setup.dry_run else "gpt2-small.json")
    cluster = os.path.join(folder, "cluster.yaml")
    with open(cluster, "w") as f:
        f.write(f"name: one-{setup.device_type}\n"
                f"training: {{global_batch: {setup.agents_batch}, precision: {setup.agents_precision}, "
                f"stage: auto}}\n"
                f"credentials: {{ca: {credentials['ca.pem']}, cert: {credentials['head.pem']}, "
                f"key: {credentials['head.key']}, token: {credentials['token']}}}\n"
                f"job: {{model: {model}, data: train.bin, steps: {setup.agents_steps}, lr: 6e-4, "
                f"warmup_steps: 5, lr_decay: cosine, decay_steps: {setup.agents_steps}, "
                f"eval_data: eval.bin, eval_every: {setup.agents_steps}, eval_samples: 32}}\n"
                f"nodes:\n  - name: gpu\n    host: 127.0.0.1\n    agent: 127.0.0.1:{port}\n"
                f"    devices: [{{type: {setup.device_type}, count: 1}}]\n")
    return cluster


def start_agent(agent, config, log_path):
    """Starts the agent; returns it once it listens, or None if it exits or does not listen
    within 20 s (its log says why)."""
    with open(config) as f:
        port = int(f.readline().rsplit(":", 1)[1])
    with open(log_path, "w") as log:
        process = subprocess.Popen([agent, "--config", config], stdout=log, stderr=subprocess.STDOUT)
    if local_cluster.listening("127.0.0.1", port, process, seconds=20):
        return process
    process.kill()
    return None


def stop_agent(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)  # it stops what it started
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def phase_agents(runner, out, setup, save_json, train_data, held_out, work_root):
    poplar, agent = programs()
    for path in (poplar, agent, os.path.join(CREDENTIALS, "token")):
        if not os.path.exists(path):
            sys.exit(f"gpu_runs: agents: {path} is missing: run scripts/gpu/prepare and carry .device")
    folder = os.path.join(work_root, "agents")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    port = worker_ranks.free_port()
    cluster = write_files(folder, setup, runner.worker, port, train_data, held_out)
    profiles, plan, run_dir = (os.path.join(folder, name) for name in ("profiles", "plan.json", "run"))
    commands = [
        ("status", [poplar, "status", cluster]),
        ("profile", [poplar, "profile", cluster, "-o", profiles, "--repeats", "1",
                     "--largest-micro-batch", str(setup.agents_largest_micro_batch)]),
        ("plan", [poplar, "plan", cluster, "--profiles", profiles, "-o", plan]),
        ("launch", [poplar, "launch", cluster, "--plan", plan, "--run-dir", run_dir, "--job-id", "gpu-agents"]),
    ]
    result = {"device_type": setup.device_type, "programs": os.path.relpath(os.path.dirname(poplar), ROOT),
              "commands": {}, "complete": False}
    save_json(out, "agents.json", result, quiet=True)  # a call stopped from here on brings back what ran
    agent_log = os.path.join(folder, "agent.log")
    process = start_agent(agent, os.path.join(folder, "agent.yaml"), agent_log)
    failed = None if process else "poplar-agent"
    try:
        for name, command in commands if process else []:
            started = time.monotonic()
            try:
                run = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
                code, stdout, stderr = run.returncode, run.stdout, run.stderr
            except subprocess.TimeoutExpired as timeout:  # a hang costs the call minutes, not all of it
                code, stdout, stderr = "timeout", timeout.stdout or "", timeout.stderr or ""
                stdout, stderr = (text.decode(errors="replace") if isinstance(text, bytes) else text
                                  for text in (stdout, stderr))
            result["commands"][name] = {"command": " ".join(["poplar"] + command[1:]),
                                        "exit": code, "seconds": round(time.monotonic() - started, 1),
                                        "stdout": stdout[-6000:], "stderr": stderr[-6000:]}
            print(f"== poplar {name} (exit {code}, {time.monotonic() - started:.1f} s)\n{stdout}{stderr}", flush=True)
            save_json(out, "agents.json", result, quiet=True)
            if code != 0:
                failed = f"poplar {name}"
                break
    finally:
        if process:
            stop_agent(process)
        with open(agent_log) as f:
            result["agent_log"] = f.read()[-6000:]
    if not failed:
        try:
            with open(os.path.join(profiles, setup.device_type + ".json")) as f:
                profile = json.load(f)
            result["profile"] = {"source": profile["source"], "memory_bytes": profile["memory_bytes"],
                                 "emulated": profile["emulated"],
                                 "stages": [{key: stage[key] for key in ("stage", "max_micro_batch",
                                                                         "optimizer_step_s")}
                                            | {"points": stage["points"]} for stage in profile["stages"]]}
            with open(plan) as f:
                result["plan"] = json.load(f)
            with open(os.path.join(run_dir, "summary.json")) as f:
                result["summary"] = json.load(f)
            result["complete"] = True
        except (OSError, ValueError, KeyError) as error:  # what the commands wrote is not what was expected
            failed = f"reading what the commands wrote ({error!r})"
    save_json(out, "agents.json", result)
    if failed:
        sys.exit(f"gpu_runs: agents: {failed} failed (agents.json has its output and the agent's log):\n"
                 + result["agent_log"][-2000:])
    print(table(AGENTS_HEADERS, agents_rows(result)))


AGENTS_HEADERS = ["device", "stage", "micro-batches", "steps", "loss", "held-out", "step ms (predicted)"]


def agents_rows(document):
    """The launch of a complete agents.json as AGENTS_HEADERS' cells."""
    summary = document["summary"]
    held_out = f"{summary['val_loss']:.3f}" if "val_loss" in summary else "-"
    return [[document["device_type"], summary["stage"],
             " ".join(str(rank["micro_batches"]) for rank in document["plan"]["ranks"]), summary["steps"],
             f"{summary['first_loss']:.3f} -> {summary['last_loss']:.3f}", held_out,
             f"{summary['measured_step_s'] * 1e3:.1f} ({summary['predicted_step_s'] * 1e3:.1f})"]]


def commands_text(document):
    """Each command run, its exit status and seconds, in order."""
    return "; ".join(f"`poplar {name}` exit {c['exit']} ({c['seconds']} s)" for name, c in document["commands"].items())
