#!/usr/bin/env python3
"""A randomized equivalence sweep of poplar-worker: random plans against one rank.

    equivalence_sweep.py WORKER MODEL.json TOKENS.bin WORK_DIR [--cases N] [--minutes M]
                         [--seed S] [--no-invalid]

Each case draws a random plan (ZeRO stage 0-3, 1-3 ranks, global batch 1-12, uneven and
empty shares, 1-4 rounds at stages 2-3), a model (MODEL.json or a random small GPT),
and flags (seed, steps, gradient clipping, weight decay, bucket size), then trains it
three ways from the same --seed:

  case    the plan on its ranks, over Gloo;
  split   the same micro-batches, in rank order, on one rank at stage 0;
  whole   one rank training the whole global batch at once (plan [[B]]).

The contract (docs/worker.md) is that a plan trains as one device training the global
batch. Summing a batch's gradient in pieces rounds differently from summing it at once,
and Adam's first steps divide by the gradient's own size, so `case` against `whole`
reaches 1e-4 on a few elements of a cancelling gradient; `split` sums the same pieces
on one rank, so `case` against `split` isolates what the ranks add (the collectives,
the shards, the rounds). The gates, for fp32 cases:

  case vs split   parameters within 1e-5; each step's loss and gradient norm within
                  1e-5 relative (rank 0's --metrics);
  case vs whole   parameters within 1e-3; losses within 1e-5 relative, gradient norms
                  within 1e-4 relative: the gradient norm is taken before clipping, so
                  a gradient summed with the wrong scale fails here even though Adam's
                  update would hide it.

bf16 cases (every fifth) are reported, and fail only if a run fails. Then, unless
--no-invalid, a list of malformed plans is fed to 2-3 ranks: every rank must exit
non-zero (not by a signal, not 0, not hung) with a message naming the plan file and
the key at fault.

Prints a line per case and a summary table, writes WORK_DIR/sweep.json, and exits 1 if
any gate failed. Every case's line can be rerun: its runs stay in WORK_DIR/runs/.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker_ranks import plan_doc, start_ranks, wait_ranks  # noqa: E402

COMMON = ["--threads", "1", "--log-every", "0", "--timeout", "60", "--lr", "1e-3"]
HANG_S = 150  # wall-clock limit for one run; the worker's own --timeout is 60
PARAMETER_GATES = {"split": 1e-5, "whole": 1e-3}
LOSS_GATES = {"split": 1e-5, "whole": 1e-5}
GRAD_NORM_GATES = {"split": 1e-5, "whole": 1e-4}


def write_json(path, doc):
    with open(path, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    return path


class Sweep:
    def __init__(self, worker, model, tokens, work):
        self.worker, self.model, self.tokens, self.work = worker, model, tokens, work
        self.runs = os.path.join(work, "runs")
        self.wholes = {}  # (model, batch, flags) -> the `whole` run, shared by the cases that need it

    def run(self, name, plan, world, args, timeout=HANG_S):
        """Starts `world` ranks of `poplar-worker train`; returns their exit codes (None: hung) and logs."""
        folder = os.path.join(self.runs, name)
        os.makedirs(folder, exist_ok=True)
        plan_path = write_json(os.path.join(folder, "plan.json"), plan)
        logs = [os.path.join(folder, f"rank{r}.log") for r in range(world)]
        codes = wait_ranks(start_ranks([[self.worker, "train", "--plan", plan_path] + args] * world, logs), timeout)
        texts = []
        for log in logs:
            with open(log, errors="replace") as f:
                texts.append(f.read())
        return {"folder": folder, "plan": plan_path, "codes": codes, "logs": texts}

    def train(self, name, plan, world, model, flags):
        """Trains and returns (state dict, [(loss, grad_norm)] per step), or a string saying what failed."""
        folder = os.path.join(self.runs, name)
        save, metrics = os.path.join(folder, "state.pt"), os.path.join(folder, "metrics.jsonl")
        for stale in (save, metrics):
            if os.path.exists(stale):
                os.remove(stale)
        args = ["--model-config", model, "--data", self.tokens, "--save", save, "--metrics", metrics] + COMMON + flags
        job = self.run(name, plan, world, args)
        if job["codes"] != [0] * world or not os.path.exists(save):
            tail = next((t.strip().splitlines()[-1] for t in job["logs"] if t.strip()), "(no output)")
            return f"{name} exited {job['codes']}: {tail}"
        with open(metrics) as f:
            steps = [json.loads(line) for line in f]
        state = torch.load(save, weights_only=False)  # libtorch's pickler tags types
        return state, [(s["loss"], s["grad_norm"]) for s in steps]

    def whole(self, model, batch, flags):
        key = (model, batch, tuple(flags))
        if key not in self.wholes:
            name = "whole-" + hashlib.sha1(repr(key).encode()).hexdigest()[:10]
            self.wholes[key] = self.train(name, plan_doc(0, [[batch]]), 1, model, flags)
        return self.wholes[key]


def parameter_difference(a, b):
    if set(a) != set(b):
        return float("inf")
    worst = 0.0
    for k in a:
        if a[k].shape != b[k].shape:
            return float("inf")
        d = (a[k].double() - b[k].double()).abs().max().item()
        worst = max(worst, d if d == d else float("inf"))  # NaN counts as infinitely far
    return worst


def relative_difference(xs, ys):
    """The largest |x - y| / |y| over steps; infinite if the step counts differ."""
    if len(xs) != len(ys):
        return float("inf")
    return max((abs(x - y) / max(abs(y), 1e-30) for x, y in zip(xs, ys)), default=0.0)


def compare(case, against):
    (state, steps), (other_state, other_steps) = case, against
    return {"parameters": parameter_difference(state, other_state),
            "loss": relative_difference([s[0] for s in steps], [s[0] for s in other_steps]),
            "grad_norm": relative_difference([s[1] for s in steps], [s[1] for s in other_steps])}


# ------------------------------------------------------------------ random cases
def composition(n, most_parts, rng):
    """A random way to write n as an ordered sum of at most most_parts positive parts."""
    if n == 0:
        return []
    k = rng.randint(1, min(n, most_parts))
    cuts = sorted(rng.sample(range(1, n), k - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [n])]


def random_plan(rng):
    """(stage, micro-batches per rank): at stages 0-1 each rank's own list (possibly empty),
    at stages 2-3 a grid of rounds shared by all ranks (zeros allowed)."""
    world, stage, batch = rng.choice([1, 2, 2, 3, 3]), rng.randint(0, 3), rng.randint(1, 12)
    if stage < 2:
        cuts = sorted(rng.randint(0, batch) for _ in range(world - 1))
        shares = [b - a for a, b in zip([0] + cuts, cuts + [batch])]
        return stage, [composition(s, rng.choice([1, 2, 3, 5, 12]), rng) for s in shares]
    rounds = rng.randint(1, 4)
    cells = [[0] * rounds for _ in range(world)]
    concentrated = rng.random() < 0.3
    for _ in range(batch):
        r = 0 if concentrated and rng.random() < 0.5 else rng.randrange(world)
        cells[r][rng.randrange(rounds)] += 1
    return stage, cells


def random_model(rng, default_model, configs):
    if rng.random() < 0.75:
        return default_model
    heads = rng.randint(1, 4)
    config = {"arch": "gpt", "n_layer": rng.randint(1, 3), "n_head": heads,
              "n_embd": rng.choice([e for e in range(16, 65) if e % heads == 0]), "vocab_size": 256,
              "block_size": rng.randint(8, 32)}
    text = json.dumps(config, sort_keys=True)
    return write_json(os.path.join(configs, hashlib.sha1(text.encode()).hexdigest()[:10] + ".json"), text)


def random_flags(rng, precision):
    flags = ["--steps", str(rng.randint(2, 4)), "--precision", precision, "--seed", str(rng.randint(1, 100000))]
    flags += rng.choice([[], [], [], ["--grad-clip", "0.5"], ["--grad-clip", "0"]])
    flags += rng.choice([[], [], [], ["--weight-decay", "0.1"], ["--weight-decay", "0"]])
    if rng.random() < 0.2:  # many small buckets
        flags += ["--bucket-mb", rng.choice(["0.004", "0.01", "0.05"])]
    return flags


def sweep_case(sweep, index, rng, precision, configs):
    stage, ranks = random_plan(rng)
    model = random_model(rng, sweep.model, configs)
    flags = random_flags(rng, precision)
    batch = sum(map(sum, ranks))
    name = f"case-{index:04d}"
    record = {"case": name, "stage": stage, "ranks": ranks, "precision": precision,
              "model": os.path.basename(model), "flags": flags}
    case = sweep.train(name, plan_doc(stage, ranks), len(ranks), model, flags)
    split = sweep.train(name + "-split", plan_doc(0, [[m for rank in ranks for m in rank if m > 0]]), 1, model, flags)
    whole = sweep.whole(model, batch, flags)
    failures = [r for r in (case, split, whole) if isinstance(r, str)]
    if failures:
        record.update(failures=failures, passed=False)
        return record
    record["split"], record["whole"] = compare(case, split), compare(case, whole)
    problems = []
    if precision == "fp32":
        for against in ("split", "whole"):
            for what, gates in (("parameters", PARAMETER_GATES), ("loss", LOSS_GATES), ("grad_norm", GRAD_NORM_GATES)):
                if not record[against][what] <= gates[against]:
                    problems.append(f"{what} vs {against} {record[against][what]:.2e} > {gates[against]:.0e}")
    record.update(failures=problems, passed=not problems)
    if record["passed"]:
        shutil.rmtree(os.path.join(sweep.runs, name))  # keep the disk small: the record reruns it
        shutil.rmtree(os.path.join(sweep.runs, name + "-split"))
    return record


# ------------------------------------------------------------------ malformed plans
def malformed_plans():
    """(label, plan (a document or raw text), ranks to start, key the message must name; None: any)."""
    P = plan_doc
    one_rank = {"format": "poplar-plan/1", "stage": 0, "global_batch": 4}
    return [
        ("sum-mismatch-s0", P(0, [[2], [2]], 5), 2, "ranks"),
        ("sum-mismatch-s3", P(3, [[3, 3], [3, 3]], 10), 2, "ranks"),
        ("unequal-rounds-s2", P(2, [[2, 1], [1]]), 2, "ranks"),
        ("unequal-rounds-s3", P(3, [[1, 1, 1], [1, 1], [1]]), 3, "ranks"),
        ("negative-s0", P(0, [[-1, 3], [2]], 4), 2, "ranks[0].micro_batches[0]"),
        ("negative-s3", P(3, [[2, 2], [-1, 1]], 4), 2, "ranks[1].micro_batches[0]"),
        ("zero-entry-s0", P(0, [[0, 2], [2]]), 2, "ranks[0].micro_batches[0]"),
        ("zero-only-rank-s1", P(1, [[2], [0]]), 2, "ranks[1].micro_batches[0]"),
        ("all-zero-s2", P(2, [[0, 0], [0, 0]], 2), 2, "ranks"),
        ("no-micro-batches", P(0, [[], []], 3), 2, "ranks"),
        ("fewer-ranks-than-world", P(0, [[2], [2]]), 3, "ranks"),
        ("more-ranks-than-world", P(2, [[1, 1], [1, 1], [1, 1]]), 2, "ranks"),
        ("duplicate-rank", dict(one_rank, ranks=[{"rank": 0, "micro_batches": [2]},
                                                 {"rank": 0, "micro_batches": [2]}]), 2, "ranks[1].rank"),
        ("rank-out-of-range", dict(one_rank, ranks=[{"rank": 0, "micro_batches": [2]},
                                                    {"rank": 2, "micro_batches": [2]}]), 2, "ranks[1].rank"),
        ("rank-missing", dict(one_rank, ranks=[{"rank": 0, "micro_batches": [2]}, {"micro_batches": [2]}]), 2,
         "ranks[1].rank"),
        ("fractional-entry", P(0, [[1.5, 0.5], [2]], 4), 2, "ranks[0].micro_batches[0]"),
        ("string-entry", P(1, [["2"], [2]], 4), 2, "ranks[0].micro_batches[0]"),
        ("null-entry", P(3, [[None, 2], [1, 1]], 4), 2, "ranks[0].micro_batches[0]"),
        ("stage-4", P(4, [[2], [2]]), 2, "stage"),
        ("stage-string", P("2", [[2], [2]]), 2, "stage"),
        ("global-batch-zero", P(0, [[2], [2]], 0), 2, "global_batch"),
        ("entry-huge", P(2, [[10**7, 0], [0, 0]], 4), 2, "ranks[0].micro_batches[0]"),
        ("format-unknown", dict(P(0, [[2], [2]]), format="poplar-plan/2"), 2, "format"),
        ("stage-missing", {"format": "poplar-plan/1", "global_batch": 2,
                           "ranks": [{"rank": 0, "micro_batches": [2]}]}, 1, "stage"),
        ("duplicate-key", '{"format": "poplar-plan/1", "stage": 0, "stage": 1, "global_batch": 2, '
                          '"ranks": [{"rank": 0, "micro_batches": [2]}]}', 1, "stage"),
        ("truncated", '{"format": "poplar-plan/1", "stage": 0, "global_batch": 2, "ranks": [', 1, None),
        ("not-an-object", "[1, 2, 3]", 1, None),
    ]


def malformed_case(sweep, label, plan, world, key):
    args = ["--model-config", sweep.model, "--data", sweep.tokens, "--steps", "2"] + COMMON
    job = sweep.run("malformed-" + label, plan, world, args, timeout=90)
    problems = []
    for r, (code, text) in enumerate(zip(job["codes"], job["logs"])):
        if code is None:
            problems.append(f"rank {r} hung")
        elif code == 0:
            problems.append(f"rank {r} accepted the plan")
        elif code < 0 or code > 128:
            problems.append(f"rank {r} died with {code}")
        elif job["plan"] not in text or (key is not None and key not in text):
            problems.append(f"rank {r}'s message names not both {job['plan']} and {key}: {text.strip()[-200:]}")
    if not problems:
        shutil.rmtree(job["folder"])
    return {"case": "malformed-" + label, "world": world, "key": key, "codes": job["codes"],
            "message": job["logs"][0].strip()[-300:], "failures": problems, "passed": not problems}


# ------------------------------------------------------------------ report
def summary(records):
    cases = [r for r in records if r["case"].startswith("case-")]
    lines = ["| stage | precision | cases | passed | worst vs split | worst vs whole | worst loss vs whole |"
             " worst grad-norm vs whole |", "|---|---|---|---|---|---|---|---|"]
    for stage in range(4):
        for precision in ("fp32", "bf16"):
            group = [r for r in cases if r["stage"] == stage and r["precision"] == precision]
            measured = [r for r in group if "split" in r]
            if not group:
                continue

            def worst(against, what):
                return f"{max(r[against][what] for r in measured):.1e}" if measured else "-"
            lines.append(f"| {stage} | {precision} | {len(group)} | {sum(r['passed'] for r in group)} | "
                         f"{worst('split', 'parameters')} | {worst('whole', 'parameters')} | "
                         f"{worst('whole', 'loss')} | {worst('whole', 'grad_norm')} |")
    malformed = [r for r in records if r["case"].startswith("malformed-")]
    if malformed:
        lines.append(f"\nmalformed plans refused by name: {sum(r['passed'] for r in malformed)} of {len(malformed)}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("worker")
    parser.add_argument("model")
    parser.add_argument("tokens")
    parser.add_argument("work")
    parser.add_argument("--cases", type=int, default=40, help="random cases to run (default 40)")
    parser.add_argument("--minutes", type=float, help="stop starting cases after this long (default: no limit)")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="the sweep's seed (printed)")
    parser.add_argument("--no-invalid", action="store_true", help="skip the malformed plans")
    args = parser.parse_args()
    sweep = Sweep(args.worker, args.model, args.tokens, args.work)
    configs = os.path.join(args.work, "models")
    os.makedirs(configs, exist_ok=True)
    deadline = time.time() + args.minutes * 60 if args.minutes else float("inf")
    rng = random.Random(args.seed)
    print(f"equivalence sweep, seed {args.seed} (rerun it with --seed {args.seed})", flush=True)
    records = []
    for index in range(1, args.cases + 1):
        if time.time() > deadline:
            break
        record = sweep_case(sweep, index, rng, "bf16" if index % 5 == 0 else "fp32", configs)
        records.append(record)
        figures = (f"vs split {record['split']['parameters']:.1e}, vs whole {record['whole']['parameters']:.1e}"
                   if "split" in record else "")
        print(f"{record['case']} stage {record['stage']} {record['precision']} {record['ranks']} {record['model']} "
              f"{' '.join(record['flags'][4:])}: {figures} {'ok' if record['passed'] else 'FAILED'}"
              + "".join(f"\n    {f}" for f in record["failures"]), flush=True)
    if not args.no_invalid:
        for label, plan, world, key in malformed_plans():
            record = malformed_case(sweep, label, plan, world, key)
            records.append(record)
            said = (record["message"].splitlines() or ["(no output)"])[-1]
            print(f"{record['case']}: {'ok' if record['passed'] else 'FAILED'} | {said}"
                  + "".join(f"\n    {f}" for f in record["failures"]), flush=True)
    print("\n" + summary(records))
    failed = [r["case"] for r in records if not r["passed"]]
    with open(os.path.join(args.work, "sweep.json.tmp"), "w") as f:
        json.dump({"seed": args.seed, "gates": {"parameters": PARAMETER_GATES, "loss": LOSS_GATES,
                                                 "grad_norm": GRAD_NORM_GATES},
                   "records": records, "failed": failed}, f, indent=1)
    os.replace(os.path.join(args.work, "sweep.json.tmp"), os.path.join(args.work, "sweep.json"))
    print(f"\n{len(records) - len(failed)} of {len(records)} passed; {os.path.join(args.work, 'sweep.json')}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
