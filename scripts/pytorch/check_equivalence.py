#!/usr/bin/env python3
"""Checks poplar-worker against PyTorch's own training: same init, data and steps.

    check_equivalence.py WORKER MODEL.json TOKENS.bin WORK_DIR [--sentences]

With --sentences, TOKENS.bin is first written (byte-level uint16, as `poplar
prepare-data` writes) from generated sentences: how the test suite runs it, with no
file from outside the repository.

Passes when, for every stage, the keys agree, each step's learning rate is PyTorch's,
and each tensor ends within 1e-3 of its own update in L2 (|poplar - pytorch| /
|pytorch - init|) and within 1e-4 anywhere. fp32 rounding is not the same in both (the
reference scales each micro-batch's loss before backward, poplar the summed gradient
once), and Adam's normalisation makes a gradient summed from cancelling terms a visible
update difference in a few elements, within those bounds.

Trains STEPS steps of global batch 12 with PyTorch (reference_gpt.py's GPT or
reference_llama.py's Llama, as MODEL.json's arch says), then with poplar-worker on 2
and 3 ranks for ZeRO stages 0-3 with uneven plans, from the same
initial state dict, and prints the largest parameter difference per stage. Then the
same with a learning-rate schedule (a warm-up, then a cosine decay), PyTorch's own
SequentialLR of LinearLR and CosineAnnealingLR against poplar-worker's --warmup-steps,
--lr-decay cosine, --decay-steps and --min-lr.
"""
import json
import os
import sys
import warnings

import numpy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_gpt as ref  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker_ranks import start_ranks, wait_ranks, write_plan  # noqa: E402

STEPS, BATCH, LR = 5, 12, 1e-3
# (stage, per-rank micro-batches): uneven plans on 2 and 3 ranks.
PLANS = [(0, [[5, 3], [4]]), (1, [[2, 2, 2, 2], [4]]), (2, [[5, 3, 0], [2, 1, 1]]), (3, [[5, 3, 0], [2, 1, 1]]),
         (0, [[3, 2], [4], [1, 2]]), (1, [[6], [1], [2, 3]]), (2, [[2, 2], [4, 1], [3, 0]]), (3, [[4, 1], [2, 2], [3, 0]])]
# Warm-up over 2 steps, then a cosine to MIN_LR over DECAY_STEPS - WARMUP = 3 steps.
WARMUP, DECAY_STEPS, MIN_LR = 2, 5, 1e-4
SCHEDULE_FLAGS = ["--warmup-steps", str(WARMUP), "--lr-decay", "cosine", "--decay-steps", str(DECAY_STEPS),
                  "--min-lr", str(MIN_LR)]


def pytorch_schedule(opt):
    """PyTorch's own schedulers for SCHEDULE_FLAGS (docs/worker.md, "Learning rate")."""
    S = torch.optim.lr_scheduler
    # SequentialLR steps the scheduler it switches to with an epoch, which PyTorch warns of.
    warnings.filterwarnings("ignore", message="The epoch parameter", category=UserWarning)
    warm = S.LinearLR(opt, start_factor=1 / WARMUP, end_factor=1.0, total_iters=WARMUP - 1)
    cosine = S.CosineAnnealingLR(opt, T_max=DECAY_STEPS - WARMUP, eta_min=MIN_LR)
    return S.SequentialLR(opt, [warm, cosine], milestones=[WARMUP])


def reference(model_path, tokens_path, init, scheduled):
    """PyTorch's parameters after STEPS steps from `init`, and its rates."""
    config = ref.load_config(model_path)
    model = ref.make_model(config)
    model.load_state_dict(torch.load(init))
    tokens = ref.Tokens(tokens_path, config["block_size"])
    opt = ref.optimizer(model, LR)
    schedule = pytorch_schedule(opt) if scheduled else None
    losses, rates = [], []
    for step in range(STEPS):
        rates.append(opt.param_groups[0]["lr"])
        losses.append(ref.train_step(model, opt, tokens, step, BATCH, 4))
        if schedule:
            schedule.step()
    print(f"PyTorch {torch.__version__}{', scheduled' if scheduled else ''}: loss {losses[0]:.4f} -> "
          f"{losses[-1]:.4f}" + (f", rates {', '.join(f'{r:.3g}' for r in rates)}" if scheduled else ""))
    return model.state_dict(), rates


def write_sentences(path):
    """60 KB of varied English-like sentences, the same every time."""
    words = ("the a model rank step loss batch device plan stage memory grows falls trains waits shards "
             "gathers reduces quickly slowly every each one two three").split()
    state, text = 12345, []
    while sum(len(w) + 1 for w in text) < 60000:
        state = (state * 1103515245 + 12345) % 2**31
        text.append(words[state % len(words)] + ("." if state % 7 == 0 else ""))
    numpy.frombuffer(" ".join(text).encode(), dtype=numpy.uint8).astype("<u2").tofile(path)


def main():
    worker, model_path, tokens_path, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    if sys.argv[5:] == ["--sentences"]:
        write_sentences(tokens_path)
    config = ref.load_config(model_path)
    torch.manual_seed(0)
    init = os.path.join(work, "init.pt")
    torch.save(dict(ref.make_model(config).state_dict()), init)
    worst = 0.0
    for scheduled in (False, True):
        worst = max(worst, compare(worker, model_path, tokens_path, work, init, scheduled))
    sys.exit(0 if worst <= 1.0 else 1)


def compare(worker, model_path, tokens_path, work, init, scheduled):
    """The worst of the stages' plans as a fraction of the bounds (above 1: failed)."""
    expected, rates = reference(model_path, tokens_path, init, scheduled)
    init_state = torch.load(init)
    worst = 0.0
    for stage, ranks in PLANS:
        if scheduled and (stage not in (1, 3) or len(ranks) != 2):
            continue  # the schedule is the engines' shared step: two stages suffice
        name = f"{stage}-{len(ranks)}ranks"
        plan = write_plan(os.path.join(work, f"plan{name}.json"), stage, ranks, BATCH)
        out = os.path.join(work, f"poplar{name}{'-scheduled' if scheduled else ''}.pt")
        metrics = out.replace(".pt", ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        command = [worker, "train", "--plan", plan, "--model-config", model_path, "--data", tokens_path,
                   "--steps", str(STEPS), "--init", init, "--save", out, "--lr", str(LR), "--log-every", "0",
                   "--metrics", metrics] + (SCHEDULE_FLAGS if scheduled else [])
        if any(wait_ranks(start_ranks([command] * len(ranks)))):
            sys.exit(f"stage {stage}: poplar-worker failed")
        actual = torch.load(out, weights_only=False)  # libtorch's pickler tags types
        difference = max((expected[k] - actual[k]).abs().max().item() for k in expected if k in actual)
        relative = max(((expected[k] - actual[k]).norm() / (expected[k] - init_state[k]).norm()).item()
                       for k in expected if k in actual)
        missing = set(expected) ^ set(actual)
        with open(metrics) as f:
            poplar_rates = [json.loads(line)["lr"] for line in f]
        if len(poplar_rates) != len(rates):
            sys.exit(f"stage {stage}: {metrics} has {len(poplar_rates)} steps, not {len(rates)}")
        rate_error = max(abs(a - b) / b for a, b in zip(poplar_rates, rates))
        exact = rate_error < 1e-9 and not missing
        worst = max(worst, difference / 1e-4, relative / 1e-3, 0.0 if exact else float("inf"))
        print(f"stage {stage}, plan {ranks}{', scheduled' if scheduled else ''}: max |poplar - pytorch| = "
              f"{difference:.2e}, {relative:.1e} of the update, rates within {rate_error:.1e}"
              + (f", key mismatch {sorted(missing)}" if missing else ""))
    return worst


if __name__ == "__main__":
    main()
