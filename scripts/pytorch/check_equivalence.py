#!/usr/bin/env python3
"""Checks poplar-worker against PyTorch's own training: same init, data and steps.

    check_equivalence.py WORKER MODEL.json TOKENS.bin WORK_DIR

Trains STEPS steps of global batch 12 with PyTorch (reference_gpt.py), then with
poplar-worker on 2 ranks for ZeRO stages 0-3 with uneven plans, from the same
initial state dict, and prints the largest parameter difference per stage.
"""
import json
import os
import socket
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_gpt as ref  # noqa: E402

STEPS, BATCH, LR = 5, 12, 1e-3
PLANS = {0: [[5, 3], [4]], 1: [[2, 2, 2, 2], [4]], 2: [[5, 3, 0], [2, 1, 1]], 3: [[5, 3, 0], [2, 1, 1]]}


def main():
    worker, model_path, tokens_path, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    config = ref.load_config(model_path)
    torch.manual_seed(0)
    model = ref.GPT(config)
    init = os.path.join(work, "init.pt")
    torch.save(dict(model.state_dict()), init)
    tokens = ref.Tokens(tokens_path, config["block_size"])
    opt = ref.optimizer(model, LR)
    losses = [ref.train_step(model, opt, tokens, step, BATCH, 4) for step in range(STEPS)]
    expected = model.state_dict()
    print(f"PyTorch {torch.__version__}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    worst = 0.0
    for stage, ranks in PLANS.items():
        plan = os.path.join(work, f"plan{stage}.json")
        with open(plan, "w") as f:
            json.dump({"stage": stage, "global_batch": BATCH,
                       "ranks": [{"rank": r, "micro_batches": m} for r, m in enumerate(ranks)]}, f)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = os.path.join(work, f"poplar{stage}.pt")
        procs = [subprocess.Popen([worker, "train", "--plan", plan, "--model-config", model_path,
                                   "--data", tokens_path, "--steps", str(STEPS), "--init", init,
                                   "--save", out, "--lr", str(LR), "--log-every", "0"],
                                  env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(len(ranks)),
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                 for r in range(len(ranks))]
        if any(p.wait() for p in procs):
            sys.exit(f"stage {stage}: poplar-worker failed")
        actual = torch.load(out, weights_only=False)  # libtorch's pickler tags types
        difference = max((expected[k] - actual[k]).abs().max().item() for k in expected if k in actual)
        missing = set(expected) ^ set(actual)
        worst = max(worst, difference)
        print(f"stage {stage}, plan {ranks}: max |poplar - pytorch| = {difference:.2e}"
              + (f", key mismatch {sorted(missing)}" if missing else ""))
    sys.exit(0 if worst < 1e-5 else 1)


if __name__ == "__main__":
    main()
