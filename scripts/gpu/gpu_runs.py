#!/usr/bin/env python3
"""poplar-worker on a CUDA GPU: correctness, training, profiles, speed and schedules.

Run by scripts/gpu/on-device on the GPU machine, one phase per call of this script:
    gpu_runs.py PHASE --worker build-cuda/launcher/poplar-worker --out DIR
Each phase prints a table last and writes one JSON file to DIR (DIR/runs.log keeps
every worker's output). In check, schedules and speed a run that fails is a row marked
failed and the phase goes on, exiting non-zero at the end; train and profile stop at it.
Needs the token files of scripts/gpu/prepare in .device/data.
`--dry-run` runs every phase on this machine's CPU with small models and few steps,
to check the scripts themselves before spending device time:
    scripts/gpu/gpu_runs.py PHASE --dry-run --worker build/launcher/poplar-worker --out out/gpu-dry

  check      equivalence with single-device training on the CPU: the same steps from
             the same initial parameters, fp32, at ZeRO stages 0-3, on the GPU with
             one rank (no collectives), one rank through a one-rank NCCL group, and
             two ranks sharing the GPU over Gloo (NCCL allows one rank per GPU), also
             with uneven state shares (3:1 at stages 1-3: uneven slices on the GPU);
             bf16 on the GPU against it too, its whole update within 10%
  train      GPT-2 small, bf16, 300 steps on WikiText-2 valid: the loss must fall
  profile    `poplar-worker profile --device cuda`: GPT-2 small and medium, bf16,
             stages 0-3; the profile files are the repository's measured examples
  schedules  measured step times of several (micro-batch, count) schedules of GPT-2
             medium, for scripts/gpu/predict-schedules (the planner's prediction)
  speed      poplar-worker against PyTorch's eager DDP (autocast bf16) and FSDP
             (bf16 mixed precision) on the same model, batch and data, interleaved:
             tokens/s, model FLOPs utilisation, ratios. One GPU is one rank: FSDP then
             shards nothing (it runs NO_SHARD), and poplar's stage 3 partitions
             nothing either; both still run their per-unit machinery. FSDP runs with
             each block checkpointed (recomputed in backward), as poplar's stage 3
             always does, so that the two make the same trade
  trace      one step of each speed system on GPT-2 small, profiled (--trace): the
             device's time by kind of kernel, and each poplar system against its PyTorch
             baseline kernel by kernel (scripts/gpu/step_traces.py), to show where a
             gap in speed lies
  agents     poplar's own path on a GPU node: one poplar-agent (NVML finds the card),
             then poplar status, profile, plan and launch from the head's side
             (scripts/gpu/agents_phase.py)
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import worker_ranks  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
import step_traces  # noqa: E402
from step_traces import table  # noqa: E402  (also predict-schedules')
MODELS = os.path.join(ROOT, "configs", "models")
DATA = os.path.join(ROOT, ".device", "data", "valid.bin")
HELD_OUT = os.path.join(ROOT, ".device", "data", "test.bin")  # the train phase's held-out loss
WORK = "/tmp/poplar-gpu"
# Dense bf16 FLOP/s of the datasheets, by a part of the card's name, first match wins:
# MFU is against this. An H100 SXM has an H200's peak; an unknown card counts as one.
BF16_PEAKS = [("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100 NVL", 835.0e12), ("H100", 989.4e12),
              ("A100", 312.0e12)]
DEFAULT_PEAK = 989.4e12

# check: 5 steps of global batch 12, uneven two-rank plans as in the CPU suite.
CHECK_STEPS, CHECK_LR = 5, 1e-3
ONE_RANK = [[4, 4, 4]]
TWO_RANKS = {0: [[5, 3], [4]], 1: [[2, 2, 2, 2], [4]], 2: [[5, 3, 0], [2, 1, 1]], 3: [[5, 3, 0], [2, 1, 1]]}
FP32_TOLERANCE = 1e-4  # max |difference| after 5 steps of lr 1e-3 (a step moves up to 1e-3)
# bf16 against the fp32 reference: its whole update |theta - theta_ref| / |theta_ref - theta_0|
# (L2 over every parameter). bf16 rounding alone stays well under the tolerance at every
# stage (docs/results/*/check.json); a gradient gone wrong in a kind of layer (every
# block's, bf16 only) is a large part of the update, and no max |difference| separates
# the two (rounding alone can move one parameter by most of the largest movement).
BF16_UPDATE_TOLERANCE = 0.1
# speed: each system and the PyTorch system its "vs PyTorch" ratio is against: poplar's
# stage 0 against DDP, stage 3 (which recomputes every block) against FSDP with each block
# checkpointed. FSDP without checkpointing has no ratio: it shows what checkpointing costs
# PyTorch, in bf16 without autocast (as poplar's bf16).
SPEED_BASELINES = {"poplar stage 0": "PyTorch DDP", "PyTorch DDP": "PyTorch DDP",
                   "poplar stage 3": "PyTorch FSDP+AC", "PyTorch FSDP+AC": "PyTorch FSDP+AC",
                   "PyTorch FSDP": None}
# The systems with a ratio, in the order the phase runs them.
SPEED_SYSTEMS = tuple(system for system, baseline in SPEED_BASELINES.items() if baseline)


class Setup:
    """What the phases run: the real thing on a GPU, or a small rehearsal on the CPU."""

    def __init__(self, dry_run):
        self.dry_run = dry_run
        self.device = "cpu" if dry_run else "cuda"
        self.small, self.medium = ("gpt-tiny", "gpt-small") if dry_run else ("gpt2-small", "gpt2-medium")
        # The agents' name for the card: NVML's (torch's) name with spaces as '-'.
        self.device_type = "emu-cpu" if dry_run else device_name(self).replace(" ", "-")
        self.peak_flops = DEFAULT_PEAK if dry_run else bf16_peak(device_name(self))
        self.train_steps, self.train_batch, self.train_fall = (30, 8, 1.0) if dry_run else (300, 16, 3.0)
        # Two passes on the GPU: its timings repeat closely, and a device call is short.
        self.profile_args = ["--repeats", "1", "--largest-micro-batch", "8"] if dry_run else \
            ["--repeats", "2", "--largest-micro-batch", "512"]
        self.schedules = [(0, 2, 2), (0, 4, 1), (3, 2, 2)] if dry_run else SCHEDULES
        # Two interleaved rounds: a schedule's step repeats closely from round to round
        # where the GPU is busy, but where libtorch's CPU-side dispatch bounds it (one-sample
        # micro-batches of GPT-2 medium) the rounds say how far a measurement itself can be
        # trusted.
        self.schedule_steps, self.schedule_warmup, self.schedule_rounds = (4, 1, 2) if dry_run else (10, 3, 2)
        # (model, micro-batch, count, systems): GPT-2 medium at 16 x 2 (accumulation) and
        # 64 x 1, GPT-2 small at 32 x 1. At 64 x 1 only stage 0 and DDP run, to keep the
        # phase within a device call's budget; GPT-2 small also runs FSDP without
        # checkpointing.
        every = SPEED_SYSTEMS[:3] if dry_run else SPEED_SYSTEMS  # PyTorch's FSDP needs a GPU
        stage0 = SPEED_SYSTEMS[:2]
        self.speed_setups = [(self.medium, 4, 2, every), (self.medium, 8, 1, stage0)] if dry_run else \
            [(self.medium, 16, 2, every), (self.medium, 64, 1, stage0),
             (self.small, 32, 1, every + ("PyTorch FSDP",))]
        self.speed_steps, self.speed_warmup, self.speed_rounds = (6, 2, 1) if dry_run else (20, 5, 2)
        # trace: GPT-2 small at 32 x 1, where poplar's stage 3 and FSDP+AC are compared
        # (docs/benchmarks.md); its 4th step, after three of warm-up.
        self.trace_setup = (self.small, 4, 1, every) if dry_run else \
            (self.small, 32, 1, every + ("PyTorch FSDP",))
        self.trace_steps = 3 if dry_run else 4
        # agents: GPT-2 small in bf16 through one poplar-agent, profiled once up to 64
        # samples, then 40 steps of a global batch of 64.
        self.agents_batch, self.agents_steps, self.agents_largest_micro_batch = (16, 20, 16) if dry_run else \
            (64, 40, 64)
        self.agents_precision = "fp32" if dry_run else "mixed"
        # check: cases run side by side (they measure results, not time); GPU memory and
        # the host's 16 cores hold this many small-model runs at once.
        self.check_parallel = 2 if dry_run else 6


class Runner:
    """Starts worker processes (one per rank, torchrun's environment) and keeps their logs."""

    def __init__(self, worker, out):
        self.worker = os.path.abspath(worker)
        os.makedirs(WORK, exist_ok=True)
        self.log = open(os.path.join(out, "runs.log"), "a")
        self.log_lock = threading.Lock()  # runs may go side by side (check)

    def ranks(self, name, rank_args, program=None, must_succeed=True):
        """Runs one process per rank; exits on a failure, or returns False if not must_succeed."""
        logs = [os.path.join(WORK, f"{name}-rank{rank}.log") for rank in range(len(rank_args))]
        codes = worker_ranks.wait_ranks(
            worker_ranks.start_ranks([(program or [self.worker]) + args for args in rank_args], logs))
        with self.log_lock:
            for rank, path in enumerate(logs):
                with open(path) as f:
                    text = f.read()
                self.log.write(f"==== {name} rank {rank} (exit {codes[rank]})\n{text}")
            self.log.flush()
        if any(codes):
            with open(logs[next(r for r, code in enumerate(codes) if code)]) as f:
                tail = f.read()[-3000:]
            if must_succeed:
                sys.exit(f"gpu_runs: {name} failed (exit {codes}):\n{tail}")
            print(f"gpu_runs: {name} failed (exit {codes}); going on without it:\n{tail}", file=sys.stderr)
            return False
        return True

    def train(self, name, stage, ranks, model, steps, device, precision, backend="auto", save=None, extra=(),
              must_succeed=True, shares=None):
        """Trains `steps` steps of the plan (stage, each rank's micro-batches, and each rank's
        state_share when `shares` is given); rank 0's metrics, or None when the run failed
        and need not succeed."""
        plan = worker_ranks.write_plan(os.path.join(WORK, f"{name}.json"), stage, ranks, shares=shares)
        metrics = os.path.join(WORK, f"{name}.jsonl")
        # --timeout 180: a rank that hangs costs a device call 3 minutes, not all of it.
        args = ["train", "--plan", plan, "--model-config", model, "--data", DATA, "--steps", str(steps),
                "--device", device, "--precision", precision, "--backend", backend, "--metrics", metrics,
                "--log-every", "0", "--timeout", "180"] + list(extra)
        if device == "cpu":
            args += ["--threads", str(max(1, (os.cpu_count() or 2) // len(ranks)))]
        if save:
            args += ["--save", save]
        if not self.ranks(name, [args] * len(ranks), must_succeed=must_succeed):
            return None
        return worker_ranks.read_metrics(metrics) if steps > 0 else []


def save_json(out, name, document, quiet=False):
    path = os.path.join(out, name)
    with open(path + ".tmp", "w") as f:
        json.dump(document, f, indent=2)
    os.replace(path + ".tmp", path)  # whole, even when the call is stopped while writing
    if not quiet:
        print(f"gpu_runs: wrote {path}")


def model_flops_per_token(config):
    """Training FLOPs per token (PaLM's accounting, as nanoGPT's estimate_mfu): 6 per
    parameter that multiplies (the tied head counts once, position embeddings not at
    all) plus attention's 12 * layers * block * width."""
    c, v, t, layers = config["n_embd"], config["vocab_size"], config["block_size"], config["n_layer"]
    multiplying = v * c + layers * (12 * c * c + 13 * c) + 2 * c
    return 6 * multiplying + 12 * layers * t * c


def device_name(setup):
    if setup.device != "cuda":
        return "CPU (dry run)"
    import torch
    return torch.cuda.get_device_name(0)


def bf16_peak(name):
    for part, peak in BF16_PEAKS:
        if part in name:
            return peak
    print(f"gpu_runs: no bf16 peak known for '{name}': MFU is against {DEFAULT_PEAK / 1e12:.0f} TFLOP/s",
          file=sys.stderr)
    return DEFAULT_PEAK


def load_config(name):
    path = os.path.join(MODELS, name + ".json")
    with open(path) as f:
        return path, json.load(f)


# ---------------------------------------------------------------- check
def phase_check(runner, out, setup):
    import torch

    def state(path):
        # Not weights-only: libtorch's pickler tags the dict's types (restore_type_tag),
        # which PyTorch 2.6's weights-only loader refuses.
        return torch.load(path, map_location="cpu", weights_only=False)

    def compare(a, b):
        return max((a[k].double() - b[k].double()).abs().max().item() for k in a)

    def norm(a, b):  # L2 norm of a - b over every parameter
        return sum(((a[k].double() - b[k].double()) ** 2).sum().item() for k in a) ** 0.5

    model, _ = load_config("gpt-small")
    # Every run starts from one initial state, written by the PyTorch reference model
    # (nanoGPT's names, as poplar-worker --init reads them; the worker trains at least
    # one step, so it cannot write its own starting point).
    sys.path.insert(0, os.path.join(ROOT, "scripts", "pytorch"))
    import reference_gpt
    init = os.path.join(WORK, "check-init.pt")
    torch.manual_seed(0)
    torch.save(dict(reference_gpt.make_model(reference_gpt.load_config(model)).state_dict()), init)
    reference = os.path.join(WORK, "check-cpu.pt")
    runner.train("check-cpu", 0, ONE_RANK, model, CHECK_STEPS, "cpu", "fp32", save=reference,
                 extra=["--lr", str(CHECK_LR), "--init", init])
    expected, start = state(reference), state(init)
    movement = compare(expected, start)
    update = norm(expected, start)  # the reference's whole update, theta_T - theta_0
    results = []
    # The two-rank cases first: they start first, so a call cut short still shows them.
    cases = [(f"{setup.device} 2 ranks gloo", stage, TWO_RANKS[stage], "fp32", "gloo", None) for stage in range(4)]
    # Uneven state shares: rank 0 holds three quarters of the sharded state.
    cases += [(f"{setup.device} 2 ranks gloo 3:1", stage, TWO_RANKS[stage], "fp32", "gloo", [3, 1])
              for stage in range(1, 4)]
    for stage in range(4):
        cases.append((f"{setup.device} 1 rank", stage, ONE_RANK, "fp32", "auto", None))
        # A named backend runs a one-rank process group: NCCL's path on one GPU.
        alone = "nccl" if setup.device == "cuda" else "gloo"
        cases.append((f"{setup.device} 1 rank {alone}", stage, ONE_RANK, "fp32", alone, None))
    for stage in range(4):
        cases.append((f"{setup.device} 1 rank", stage, ONE_RANK, "bf16", "auto", None))

    lock = threading.Lock()  # results and check.json, as cases finish side by side

    def save(done):  # after every case, so that a call stopped at its limit keeps the cases done
        save_json(out, "check.json", {"steps": CHECK_STEPS, "lr": CHECK_LR, "model": "gpt-small",
                                      "reference": "poplar-worker on the CPU, 1 rank, fp32",
                                      "movement": movement, "tolerance": FP32_TOLERANCE,
                                      "bf16_update_tolerance": BF16_UPDATE_TOLERANCE,
                                      "cases": sorted(results, key=lambda r: r["order"]),
                                      "torch": torch.__version__, "device": device_name(setup), "complete": done},
                  quiet=not done)

    def run(order, case):
        label, stage, ranks, precision, backend, shares = case
        name = f"check-s{stage}-{len(ranks)}r-{backend}-{precision}" + ("-shares" if shares else "")
        saved = os.path.join(WORK, name + ".pt")
        result = {"order": order, "case": label, "stage": stage, "plan": ranks, "precision": precision,
                  "backend": backend, "state_shares": shares}

        def train(attempt):
            return runner.train(attempt, stage, ranks, model, CHECK_STEPS, setup.device, precision, backend,
                                save=saved, extra=["--lr", str(CHECK_LR), "--init", init], must_succeed=False,
                                shares=shares)

        # A case that fails is run once more: side by side, another case's socket may take
        # the port free_port() found before this rank 0 binds it. A case that fails twice
        # is a failed case; the others still run and report.
        ran = train(name) is not None
        if not ran:
            result["retried"] = True
            ran = train(name + "-again") is not None
        if not ran:
            result.update(ok=False, error="the run failed, twice (runs.log)")
        else:
            trained = state(saved)
            difference = compare(trained, expected)
            update_error = norm(trained, expected) / update
            result.update(max_abs_difference=difference, relative_to_movement=difference / movement,
                          update_error=update_error,
                          ok=difference <= FP32_TOLERANCE if precision == "fp32" else
                          update_error <= BF16_UPDATE_TOLERANCE)
        with lock:
            results.append(result)
            save(done=False)

    # Each case is its own job on its own port; their results do not depend on timing.
    with ThreadPoolExecutor(max_workers=setup.check_parallel) as pool:
        for future in [pool.submit(run, order, case) for order, case in enumerate(cases)]:
            future.result()  # raises what a case raised
    results.sort(key=lambda r: r["order"])
    save(done=True)
    print(f"\nagainst the CPU, 1 rank, fp32 ({CHECK_STEPS} steps, lr {CHECK_LR}; the largest parameter "
          f"moved {movement:.2e}):")
    print("(update error: |theta - theta_ref| / |theta_ref - theta_0|, L2 over all parameters)")
    print(table(CHECK_HEADERS, check_rows(results)))
    if any(r["ok"] is False for r in results):
        sys.exit("gpu_runs: check FAILED")


CHECK_HEADERS = ["case", "stage", "micro-batches", "precision", "max |diff|", "update error", "result"]


def check_rows(cases):
    """check.json's cases as table rows (CHECK_HEADERS); also scripts/gpu/report's."""
    rows = []
    for case in cases:
        start = [case["case"], case["stage"], str(case["plan"]), case["precision"]]
        if "max_abs_difference" not in case:
            rows.append(start + ["-", "-", "FAIL (run failed)"])
            continue
        rows.append(start + [f"{case['max_abs_difference']:.2e}", f"{case['update_error']:.1e}",
                             {True: "ok", False: "FAIL", None: "(reported)"}[case["ok"]]])
    return rows


# ---------------------------------------------------------------- train
def phase_train(runner, out, setup):
    steps = setup.train_steps
    model, config = load_config(setup.small)
    # nanoGPT's recipe: a warm-up over a tenth of the steps, then a cosine to lr / 10; the
    # loss on 64 samples of WikiText-2's test split every quarter of the run (held out).
    schedule = ["--lr", "6e-4", "--warmup-steps", str(max(1, steps // 10)), "--lr-decay", "cosine"]
    held_out = ["--eval-data", HELD_OUT, "--eval-every", str(max(1, steps // 4)), "--eval-samples", "64"]
    lines = runner.train("train", 0, [[setup.train_batch]], model, steps, setup.device, "bf16",
                         extra=schedule + held_out)
    losses = [line["loss"] for line in lines]
    val_losses = {line["step"]: line["val_loss"] for line in lines if "val_loss" in line}
    tokens = statistics.median(line["tokens_per_s"] for line in lines[10:])
    save_json(out, "train.json", {"model": setup.small, "precision": "bf16", "global_batch": setup.train_batch,
                                  "steps": steps, "lr": 6e-4, "schedule": " ".join(schedule[2:]), "losses": losses,
                                  "held_out": " ".join(held_out[2:]), "val_losses": val_losses,
                                  "median_tokens_per_s": tokens})
    print(f"\n{setup.small}, bf16, batch {setup.train_batch} x {config['block_size']} tokens, WikiText-2 valid; "
          f"median {tokens:,.0f} tokens/s")
    print(table(TRAIN_HEADERS, train_rows(losses, val_losses)))
    if not losses[-1] < losses[0] - setup.train_fall:
        sys.exit(f"gpu_runs: the loss did not fall enough: {losses[0]:.3f} -> {losses[-1]:.3f}")


TRAIN_HEADERS = ["step", "loss", "held-out loss"]


def train_rows(losses, val_losses):
    """The loss at a few steps and at every evaluation (TRAIN_HEADERS); val_losses by step,
    keys numbers or (read back from train.json) strings. Also scripts/gpu/report's."""
    val = {int(step): loss for step, loss in val_losses.items()}
    marks = sorted({1, 10, 50, 100, 200, len(losses)} | set(val))
    return [[m, f"{losses[m - 1]:.4f}", f"{val[m]:.4f}" if m in val else ""] for m in marks if m <= len(losses)]


# ---------------------------------------------------------------- profile
def phase_profile(runner, out, setup):
    rows = []
    for name in [setup.small, setup.medium]:
        model, _ = load_config(name)
        path = os.path.join(out, f"{setup.device_type}-{name}-bf16.json")
        start = time.time()
        runner.ranks(f"profile-{name}", [["profile", "--device", setup.device, "--model-config", model,
                                          "--device-type", setup.device_type, "--precision", "bf16",
                                          "-o", path] + setup.profile_args])
        with open(path) as f:
            profile = json.load(f)
        rows += profile_rows(name, profile)
        print(f"gpu_runs: profiled {name} in {time.time() - start:.0f} s")
    print(f"\nprofiles ({setup.device_type}, bf16):")
    print(table(PROFILE_HEADERS, rows))


PROFILE_HEADERS = ["model", "stage", "max micro-batch", "1 sample ms", "largest: ms", "peak GiB", "optimizer ms",
                   "CUDA graph replays: size ms (eager ms)"]


def profile_rows(name, profile):
    """A profile file's table rows (PROFILE_HEADERS), one per stage; also scripts/gpu/report's."""
    rows = []
    for stage in profile["stages"]:
        largest = stage["points"][-1]
        replays = ", ".join(f"{p['micro_batch']}: {p['graph_compute_s'] * 1e3:.1f} ({p['compute_s'] * 1e3:.1f})"
                            for p in stage["points"] if "graph_compute_s" in p)
        rows.append([name, stage["stage"], stage["max_micro_batch"], f"{stage['points'][0]['compute_s'] * 1e3:.1f}",
                     f"{largest['micro_batch']}: {largest['compute_s'] * 1e3:.1f}",
                     f"{largest['peak_bytes'] / 2**30:.1f}", f"{stage['optimizer_step_s'] * 1e3:.2f}",
                     replays or "-"])
    return rows


# ---------------------------------------------------------------- schedules
SCHEDULES = [(0, 1, 8), (0, 4, 2), (0, 4, 8), (0, 8, 1), (0, 8, 4), (0, 16, 1), (0, 16, 2), (0, 32, 1),
             (3, 8, 2), (3, 16, 1)]


def phase_schedules(runner, out, setup):
    steps, warmup, rounds = setup.schedule_steps, setup.schedule_warmup, setup.schedule_rounds
    model, _ = load_config(setup.medium)
    keys = ["step_s", "compute_s", "optimizer_s", "communication_s"]
    # Per schedule: each round's steps after the warm-up, or None where a run failed.
    steps_of = {schedule: [] for schedule in setup.schedules}

    def entry(schedule):
        stage, size, count = schedule
        result = {"stage": stage, "micro_batch": size, "count": count, "global_batch": size * count}
        runs = [lines for lines in steps_of[schedule] if lines is not None]
        if len(runs) < len(steps_of[schedule]):
            result["failed_rounds"] = len(steps_of[schedule]) - len(runs)  # runs.log says why
        if not runs:
            return {**result, "failed": True}
        # measured: medians over every round's steps; rounds: each round's median step.
        every = [line for lines in runs for line in lines]
        result["measured"] = {key: statistics.median(line[key] for line in every) for key in keys}
        result["rounds_step_s"] = [statistics.median(line["step_s"] for line in lines) for lines in runs]
        return result

    def save(done):  # after every run, as schedules.json
        save_json(out, "schedules.json", {"model": setup.medium, "precision": "bf16",
                                          "device_type": setup.device_type, "steps": steps, "warmup": warmup,
                                          "rounds": rounds, "complete": done,
                                          "schedules": [entry(s) for s in setup.schedules if steps_of[s]]},
                  quiet=not done)

    for round_index in range(rounds):  # interleaved, so that drift affects every schedule alike
        for schedule in setup.schedules:
            stage, size, count = schedule
            if None in steps_of[schedule]:
                continue  # failed in an earlier round (out of memory, say): not tried again
            name = f"schedule-s{stage}-{size}x{count}-round{round_index + 1}"
            # One schedule that fails (out of memory on a smaller card) costs its row only.
            lines = runner.train(name, stage, [[size] * count], model, steps, setup.device, "bf16",
                                 must_succeed=False)
            steps_of[schedule].append(None if lines is None else lines[warmup:])
            save(done=False)
    save(done=True)
    results = [entry(s) for s in setup.schedules]
    print(f"\nmeasured step times, {setup.medium}, bf16 (medians over {rounds} rounds; "
          f"predictions: scripts/gpu/predict-schedules):")
    rows = []
    for r in results:
        times = r.get("measured")
        rows.append([r["stage"], f"{r['micro_batch']} x {r['count']}"] +
                    ([f"{times['step_s'] * 1e3:.1f}", rounds_text(r["rounds_step_s"]),
                      f"{times['compute_s'] * 1e3:.1f}", f"{times['optimizer_s'] * 1e3:.2f}"]
                     if times else ["failed", "-", "-", "-"]))
    print(table(["stage", "micro-batches", "step ms", "rounds ms", "compute ms", "optimizer ms"], rows))
    if any(r.get("failed") or r.get("failed_rounds") for r in results):
        sys.exit("gpu_runs: schedules: a run failed (runs.log says why); the table has the others")


def rounds_text(step_seconds):
    """Each round's median step in ms, and their spread: (largest - smallest) / smallest."""
    text = ", ".join(f"{s * 1e3:.1f}" for s in step_seconds)
    if len(step_seconds) > 1:
        text += f" ({100 * (max(step_seconds) / min(step_seconds) - 1):.1f}%)"
    return text


PREDICTION_HEADERS = ["stage", "micro-batches", "measured ms", "rounds ms (spread)", "predicted ms", "error"]


def prediction_row(row):
    """One schedule of prediction.json as PREDICTION_HEADERS' cells."""
    rounds = rounds_text(row["rounds_step_s"]) if "rounds_step_s" in row else "-"
    return [row["stage"], f"{row['micro_batch']} x {row['count']}", f"{row['measured_step_s'] * 1e3:.1f}", rounds,
            f"{row['predicted_step_s'] * 1e3:.1f}", f"{100 * row['error']:+.1f}%"]


# ---------------------------------------------------------------- speed
def matmul_ceiling():
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 10 * 2 * 8192 ** 3 / (start.elapsed_time(end) / 1e3)


def run_system(runner, label, system, model, size, count, steps, setup, extra=()):
    """Trains one rank of `system` (a SPEED_BASELINES key) in bf16, `count` micro-batches of
    `size` a step; rank 0's metrics lines, empty when the run failed. `extra`: flags both
    poplar-worker train and train_pytorch.py take (--trace)."""
    if system.startswith("poplar"):
        return runner.train(label, int(system[-1]), [[size] * count], model, steps, setup.device, "bf16",
                            extra=extra, must_succeed=False) or []
    metrics = os.path.join(WORK, label + ".jsonl")
    mode = "ddp" if "DDP" in system else "fsdp"
    checkpointing = ["--checkpoint-blocks"] if system.endswith("+AC") else []
    pytorch = [sys.executable, os.path.join(ROOT, "scripts", "pytorch", "train_pytorch.py")]
    ran = runner.ranks(label, [["--mode", mode, *checkpointing, "--model-config", model, "--data", DATA,
                                "--steps", str(steps), "--global-batch", str(size * count),
                                "--micro-batch", str(size), "--metrics", metrics, "--device", setup.device,
                                "--precision", "bf16", "--threads", str(os.cpu_count() or 1), *extra]],
                       program=pytorch, must_succeed=False)
    return worker_ranks.read_metrics(metrics) if ran else []


def phase_speed(runner, out, setup):
    import torch
    steps, warmup, rounds = setup.speed_steps, setup.speed_warmup, setup.speed_rounds
    setups = setup.speed_setups
    ceiling = setup.peak_flops if setup.dry_run else matmul_ceiling()
    # (model, micro-batch, count, system): tokens/s of each run that succeeded; tried
    measured, attempted = {}, set()

    def summary():
        """The results of every (model, micro-batches, system) tried so far."""
        results = []
        for name, size, count, systems in setups:
            _, config = load_config(name)
            flops = model_flops_per_token(config)
            for system in systems:
                key = (name, size, count, system)
                if key not in attempted:
                    continue
                if key not in measured:
                    results.append({"model": name, "system": system, "micro_batch": size, "count": count,
                                    "failed": True})
                    continue
                tokens = statistics.median(measured[key])
                baseline = SPEED_BASELINES[system]
                # The dry run has no FSDP to set stage 3 against: no ratio rather than nan.
                base_key = (name, size, count, baseline)
                base = statistics.median(measured[base_key]) if base_key in measured else None
                mfu = tokens * flops / setup.peak_flops
                results.append({"model": name, "system": system, "micro_batch": size, "count": count,
                                "tokens_per_s": tokens, "runs": measured[key], "mfu": mfu,
                                "of_matmul_ceiling": tokens * flops / ceiling,
                                "vs_pytorch": tokens / base if base else None})
        return results

    def save(done):
        # After every run, so that a call stopped at its time limit brings back the runs it
        # finished ("complete": false until the last).
        save_json(out, "speed.json", {"precision": "bf16", "steps": steps, "warmup": warmup, "rounds": rounds,
                                      "peak_flops": setup.peak_flops, "matmul_ceiling_flops": ceiling,
                                      "torch": torch.__version__, "device": device_name(setup),
                                      "complete": done, "results": summary()}, quiet=not done)

    for _ in range(rounds):  # interleaved, so that drift affects every system alike
        for name, size, count, systems in setups:
            model, config = load_config(name)
            for system in systems:
                key = (name, size, count, system)
                label = f"speed-{name}-{size}x{count}-{system.replace(' ', '-')}"
                attempted.add(key)
                # A run that fails (a PyTorch API gone in its version, a stage out of
                # memory) costs its row, not the phase: the others' figures come back.
                lines = run_system(runner, label, system, model, size, count, steps, setup)
                if lines and len(lines) > warmup:
                    tokens = statistics.median(line["tokens_per_s"] for line in lines[warmup:])
                    measured.setdefault(key, []).append(tokens)
                save(done=False)
    save(done=True)
    results = summary()
    print(f"\nspeed, bf16, one {device_name(setup)} (bf16 8192^3 matmul: {ceiling / 1e12:.0f} TFLOP/s; "
          f"MFU against {setup.peak_flops / 1e12:.0f}):")
    print(table(SPEED_HEADERS, speed_rows(results)))
    if any(r.get("failed") for r in results):
        sys.exit("gpu_runs: speed: a run failed (runs.log says why); the table has the others")


SPEED_HEADERS = ["model", "micro-batches", "system", "tokens/s", "MFU", "of matmul", "vs PyTorch"]


def speed_rows(results):
    """speed.json's results as table rows (SPEED_HEADERS); also scripts/gpu/report's."""
    rows = []
    for r in results:
        batches = f"{r['micro_batch']} x {r['count']}"
        if r.get("failed"):
            rows.append([r["model"], batches, r["system"], "failed", "-", "-", "-"])
            continue
        ratio = f"{r['vs_pytorch']:.2f}x" if r.get("vs_pytorch") else "-"
        rows.append([r["model"], batches, r["system"], f"{r['tokens_per_s']:,.0f}", f"{100 * r['mfu']:.1f}%",
                     f"{100 * r['of_matmul_ceiling']:.1f}%", ratio])
    return rows


# ---------------------------------------------------------------- trace
# The pairs the trace phase sets side by side, kernel by kernel: poplar against the
# PyTorch system its speed ratio is against, and each against its own other stage or mode
# (what recomputing blocks costs poplar, and what it costs PyTorch).
TRACE_PAIRS = [("poplar stage 3", "PyTorch FSDP+AC"), ("poplar stage 0", "PyTorch DDP"),
               ("poplar stage 3", "poplar stage 0"), ("PyTorch FSDP+AC", "PyTorch FSDP")]


def phase_trace(runner, out, setup):
    name, size, count, systems = setup.trace_setup
    model, _ = load_config(name)
    steps = setup.trace_steps
    traces, failed = {}, []
    for system in systems:
        label = f"trace-{name}-{size}x{count}-{system.replace(' ', '-')}"
        path = os.path.join(WORK, label + "-step.json")
        if os.path.exists(path):
            os.remove(path)  # a file from an earlier call must not pass for this run's
        lines = run_system(runner, label, system, model, size, count, steps, setup,
                           extra=["--trace", path, "--trace-step", str(steps)])
        if lines and os.path.exists(path):
            traces[system] = step_traces.load(path)
        else:
            failed.append(system)
    summaries = {system: step_traces.summary(trace) for system, trace in traces.items()}
    differences = {(a, b): step_traces.differences(traces[a], traces[b])
                   for a, b in TRACE_PAIRS if a in traces and b in traces}
    save_json(out, "trace.json", {
        "model": name, "micro_batch": size, "count": count, "precision": "bf16", "step": steps,
        "device": device_name(setup), "systems": summaries, "failed": failed,
        "differences": {f"{a} vs {b}": rows for (a, b), rows in differences.items()}})
    print(f"\ntrace, {name} {size} x {count}, bf16, step {steps}, one {device_name(setup)} (ms; the device's "
          f"kernels by kind where the profiler sees them):")
    print(table(*step_traces.kinds_table(list(summaries.items()))))
    for (a, b), rows in differences.items():
        print(f"\n{a} against {b}, the largest differences:")
        print(table(*step_traces.differences_table(rows[:10], a, b)))
    if failed:
        sys.exit(f"gpu_runs: trace: {', '.join(failed)} failed (runs.log says why); the table has the others")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["check", "train", "profile", "schedules", "speed", "trace", "agents"])
    parser.add_argument("--worker", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, small models, few steps")
    args = parser.parse_args()
    if not os.path.exists(DATA):
        sys.exit(f"gpu_runs: {DATA} is missing: run scripts/gpu/prepare and carry .device")
    os.makedirs(args.out, exist_ok=True)
    runner = Runner(args.worker, args.out)
    if args.phase == "agents":
        import agents_phase
        agents_phase.phase_agents(runner, args.out, Setup(args.dry_run), save_json, DATA, HELD_OUT, WORK)
        return
    {"check": phase_check, "train": phase_train, "profile": phase_profile, "schedules": phase_schedules,
     "speed": phase_speed, "trace": phase_trace}[args.phase](runner, args.out, Setup(args.dry_run))


if __name__ == "__main__":
    main()
