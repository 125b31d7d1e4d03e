"""The built-in default cluster on one machine, shared by scripts/demo and
scripts/bench-launch: credentials (scripts/make-cluster-credentials), the token files in
each agent's work directory (tokens.bin to train on, eval.bin held out), and the two poplar-agents of configs/local-agent-*.yaml,
started and stopped here. Everything lives in out/demo/."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "out", "demo")
BUILD = os.path.join(ROOT, os.environ.get("POPLAR_BUILD_DIR", "build"))
CLUSTER = os.path.join(ROOT, "configs", "local-emulated.yaml")
AGENTS = {"fast": ("127.0.0.1", 7151), "slow": ("127.0.0.1", 7152)}
POPLAR = os.path.join(BUILD, "planner", "poplar")
AGENT = os.path.join(BUILD, "agent", "poplar-agent")


PROGRAMS = ("poplar", "poplar-agent", "poplar-worker")


def run(args, **kwargs):
    return subprocess.run(args, check=True, **kwargs)


def build(targets=PROGRAMS, quiet=True):
    """Builds only `targets` (scripts/build); with quiet=False, Ninja's progress shows."""
    run([os.path.join(ROOT, "scripts", "build"), *targets], stdout=subprocess.DEVNULL if quiet else None)


def poplar(args, caller):
    """Runs `poplar ARGS`; returns its stdout, or exits naming `caller` and poplar's error."""
    result = subprocess.run([POPLAR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"{caller}: poplar {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def cache_dir(agent):
    """The profile cache of agent `agent` (configs/local-agent-<agent>.yaml's cache_dir)."""
    return os.path.join(OUT, "agents", agent, "cache")


def corpora():
    """The text to train on and the held-out text: WikiText-2's validation and test splits
    from ../shared when present, else poplar's own docs (docs/*.md, written to out/demo),
    the last tenth held out. The demo's and the CPU benchmarks' text."""
    shared = os.path.join(ROOT, "..", "shared", "data", "wikitext-2")
    if os.path.exists(os.path.join(shared, "valid.txt")) and os.path.exists(os.path.join(shared, "test.txt")):
        return os.path.join(shared, "valid.txt"), os.path.join(shared, "test.txt")
    docs = ""
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if not name.endswith(".md"):
            continue  # docs/results holds JSON measurements, not text
        with open(os.path.join(ROOT, "docs", name)) as f:
            docs += f.read()
    cut = len(docs) * 9 // 10
    os.makedirs(OUT, exist_ok=True)
    paths = os.path.join(OUT, "docs-train.txt"), os.path.join(OUT, "docs-heldout.txt")
    for path, text in zip(paths, (docs[:cut], docs[cut:])):
        with open(path, "w") as out:
            out.write(text)
    return paths


def prepare(fresh=True):
    """Credentials and token files; with `fresh`, out/demo is emptied first."""
    if fresh:
        shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT, exist_ok=True)
    credentials = os.path.join(OUT, "credentials")
    if not os.path.exists(os.path.join(credentials, "token")):
        nodes = [arg for name, (host, _) in AGENTS.items() for arg in ("--node", f"{name}={host}")]
        run([os.path.join(ROOT, "scripts", "make-cluster-credentials"), credentials] + nodes, stdout=subprocess.DEVNULL)
    files = ("tokens.bin", "eval.bin")  # the cluster file's job.data and job.eval_data
    if not all(os.path.exists(os.path.join(OUT, name)) for name in files):
        for text, name in zip(corpora(), files):
            run([POPLAR, "prepare-data", text, "-o", os.path.join(OUT, name)])
    for agent in AGENTS:
        work = os.path.join(OUT, "agents", agent, "work")
        os.makedirs(work, exist_ok=True)
        for name in files:
            shutil.copyfile(os.path.join(OUT, name), os.path.join(work, name))


def listening(host, port, process, seconds=10):
    """Whether `process` (a poplar-agent) listens on host:port within `seconds`; False as
    soon as it exits."""
    for _ in range(int(seconds / 0.05)):
        if process.poll() is not None:
            return False
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return True
        time.sleep(0.05)
    return False


def wait_listening(host, port, process, log):
    if not listening(host, port, process):
        state = f"exited (status {process.returncode})" if process.poll() is not None else \
            f"did not start listening on {host}:{port}"
        sys.exit(f"poplar-agent {state}; see {log}")


def agent_config(name):
    """configs/local-agent-<name>.yaml, the agent file of agent `name`."""
    return os.path.join(ROOT, "configs", f"local-agent-{name}.yaml")


@contextlib.contextmanager
def agents(configs=None):
    """Starts both agents, each with its agent file, or the one `configs` (name -> path) gives;
    stops them (SIGTERM: they stop their jobs) on the way out."""
    processes = []
    try:
        for name, (host, port) in AGENTS.items():
            log = os.path.join(OUT, f"agent-{name}.log")
            with open(log, "w") as out:
                process = subprocess.Popen(
                    [AGENT, "--config", (configs or {}).get(name, agent_config(name))],
                    stdout=out, stderr=subprocess.STDOUT)
            processes.append(process)
            wait_listening(host, port, process, log)
        yield
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
