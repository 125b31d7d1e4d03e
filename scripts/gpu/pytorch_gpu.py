#!/usr/bin/env python3
"""PyTorch's own eager training of poplar's GPT on a GPU, the baseline of gpu_runs.py speed.

Started like poplar-worker, with torchrun's environment; NCCL process group.
  --mode ddp:   DistributedDataParallel, autocast to bf16 (fp32 weights and Adam state),
                gradient accumulation under no_sync()
  --mode fsdp:  FullyShardedDataParallel, FULL_SHARD (ZeRO-3), one unit per block, bf16
                mixed precision (bf16 parameters, gradients and reductions; fp32 master
                weights and Adam state), as poplar-worker's bf16 (with one rank FSDP
                shards nothing: it switches to NO_SHARD)
Both use the model of scripts/pytorch/reference_gpt.py (fused attention), the loss in
fp32 summed over tokens and scaled to the global mean, gradient clipping at 1.0 and
fused AdamW; the step is timed after torch.cuda.synchronize(), like poplar-worker's,
which waits for the device when it reads the loss. Rank 0 writes one JSON line per step.
`--device cpu` (Gloo, DDP only, unfused AdamW) is for gpu_runs.py's dry run.
"""
import argparse
import functools
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pytorch"))
import reference_gpt as ref  # noqa: E402


def wrap(model, mode, device):
    if mode == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    bf16 = torch.bfloat16
    return FullyShardedDataParallel(
        model, sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=device,
        auto_wrap_policy=ModuleWrapPolicy({ref.Block}), use_orig_params=True,
        mixed_precision=MixedPrecision(param_dtype=bf16, reduce_dtype=bf16, buffer_dtype=bf16))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["ddp", "fsdp"], required=True)
    parser.add_argument("--model-config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    elif args.mode != "ddp":
        sys.exit("pytorch_gpu: --device cpu runs DDP only")
    else:
        device = torch.device("cpu")
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = ref.load_config(args.model_config)
    torch.manual_seed(1337)
    model = ref.GPT(config).to(device)
    wrapped = wrap(model, args.mode, device)
    # Decay the matrices and embeddings, not biases or LayerNorms (as poplar-worker and
    # reference_gpt), chosen by name: FSDP may flatten the parameters it shards.
    decays = lambda name: name.endswith(".weight") and "ln_" not in name
    decay = [p for n, p in wrapped.named_parameters() if decays(n)]
    no_decay = [p for n, p in wrapped.named_parameters() if not decays(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    autocast = (functools.partial(torch.autocast, device.type, dtype=torch.bfloat16) if args.mode == "ddp"
                else torch.enable_grad)
    tokens = ref.Tokens(args.data, config["block_size"])
    share = args.global_batch // world
    out = open(args.metrics, "w") if rank == 0 else None
    for step in range(args.steps):
        synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        first = step * args.global_batch + rank * share
        total = torch.zeros((), device=device)
        starts = list(range(0, share, args.micro_batch))
        for i, offset in enumerate(starts):
            count = min(args.micro_batch, share - offset)
            x, y = (t.to(device, non_blocking=True) for t in tokens.batch(first + offset, count))
            last = i == len(starts) - 1
            with (wrapped.no_sync() if not last else torch.enable_grad()), autocast():
                logits = wrapped(x)
                loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), reduction="sum")
            # DDP and FSDP average over ranks; scale so the result is the global mean.
            (loss * world / (args.global_batch * tokens.L)).backward()
            total += loss.detach()
        if args.mode == "ddp":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        else:
            wrapped.clip_grad_norm_(1.0)
        opt.step()
        dist.all_reduce(total)
        mean_loss = total.item() / (args.global_batch * tokens.L)  # waits for the device
        elapsed = time.perf_counter() - start
        if out:
            out.write(json.dumps({"step": step + 1, "loss": mean_loss, "step_s": elapsed,
                                  "tokens_per_s": args.global_batch * tokens.L / elapsed}) + "\n")
            out.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
