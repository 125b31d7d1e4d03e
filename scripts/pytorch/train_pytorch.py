#!/usr/bin/env python3
"""One rank of PyTorch's own data-parallel training of poplar's GPT, for benchmarks.

Started like poplar-worker, with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); Gloo process group on CPU.
  --mode ddp:   DistributedDataParallel, gradient accumulation under no_sync()
  --mode zero1: DDP + torch.distributed.optim.ZeroRedundancyOptimizer(AdamW)
Each rank takes its share of global batch t (samples in rank order, as poplar does) in
micro-batches of --micro-batch; rank 0 writes one JSON line per step (step_s, loss).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_gpt as ref  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["ddp", "zero1"], required=True)
    parser.add_argument("--model-config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--metrics", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = ref.load_config(args.model_config)
    torch.manual_seed(1337)
    model = ref.GPT(config)
    ddp = DistributedDataParallel(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    if args.mode == "zero1":
        opt = ZeroRedundancyOptimizer(decay, optimizer_class=torch.optim.AdamW, lr=args.lr,
                                      betas=(0.9, 0.95), weight_decay=0.1)
        opt.add_param_group({"params": no_decay, "weight_decay": 0.0})
    else:
        opt = ref.optimizer(model, args.lr)
    tokens = ref.Tokens(args.data, config["block_size"])
    share = args.global_batch // world
    out = open(args.metrics, "w") if rank == 0 else None
    for step in range(args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        first = step * args.global_batch + rank * share
        total = 0.0
        starts = list(range(0, share, args.micro_batch))
        for i, offset in enumerate(starts):
            count = min(args.micro_batch, share - offset)
            x, y = tokens.batch(first + offset, count)
            last = i == len(starts) - 1
            context = ddp.no_sync() if not last else torch.enable_grad()
            with context:
                logits = ddp(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="sum")
                # DDP averages over ranks; scale so the result is the global mean.
                (loss * world / (args.global_batch * tokens.L)).backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        elapsed = time.perf_counter() - start
        if out:
            out.write(json.dumps({"step": step + 1, "step_s": elapsed,
                                  "tokens_per_s": args.global_batch * tokens.L / elapsed}) + "\n")
            out.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
