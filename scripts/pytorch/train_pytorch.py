#!/usr/bin/env python3
"""One rank of PyTorch's own data-parallel training of poplar's models, for benchmarks.

Started like poplar-worker, with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); Gloo on the CPU (--device cpu, the default), NCCL on a GPU.
  --mode ddp:   DistributedDataParallel, gradient accumulation under no_sync()
  --mode zero1: DDP + torch.distributed.optim.ZeroRedundancyOptimizer(AdamW)
  --mode fsdp:  FullyShardedDataParallel, FULL_SHARD (ZeRO-3), one unit per layer (GPU
                only; with one rank FSDP shards nothing: it switches to NO_SHARD);
                gradients are reduced after every micro-batch, as ZeRO-3 does
--checkpoint-blocks: each block's activations are recomputed in backward (non-reentrant
activation checkpointing), the trade poplar-worker's stage 3 always makes.
--precision bf16: DDP and ZeRO-1 autocast to bf16 (fp32 weights and Adam state); FSDP
keeps bf16 parameters, gradients and reductions with fp32 master weights and Adam
state, as poplar-worker's bf16.
Each rank takes its share of global batch t (samples in rank order, as poplar does) in
micro-batches of --micro-batch. The model is reference_gpt.py's GPT or reference_llama.py's
Llama, as the model config's arch says; the loss
is fp32, summed over tokens and scaled to the global mean; gradients are clipped at 1.0;
AdamW decays matrices and embeddings only, fused on a GPU. A step is timed from a
synchronised device to the loss read back, like poplar-worker's. Rank 0 writes one
JSON line per step (loss, step_s, tokens_per_s). --trace FILE: rank 0 profiles step
--trace-step (torch.profiler) and writes what poplar-worker's --trace writes
(launcher/worker/step_trace.h), so that the two compare kernel by kernel.
"""
import argparse
import contextlib
import functools
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_gpt as ref  # noqa: E402


def wrap(model, mode, device, bf16, layer):
    if mode != "fsdp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    precision = (MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                buffer_dtype=torch.bfloat16) if bf16 else None)
    return FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=device,
                                    auto_wrap_policy=ModuleWrapPolicy({layer}), use_orig_params=True,
                                    mixed_precision=precision)


def checkpoint_blocks(wrapped, layer):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
    apply_activation_checkpointing(
        wrapped, check_fn=lambda module: isinstance(module, layer),
        checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT))


def optimizer(wrapped, mode, lr, fused):
    decay, no_decay = ref.parameter_groups(wrapped.named_parameters())
    settings = dict(lr=lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if fused else {}))
    if mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(decay["params"], optimizer_class=torch.optim.AdamW,
                                      weight_decay=decay["weight_decay"], **settings)
        opt.add_param_group(no_decay)
        return opt
    return torch.optim.AdamW([decay, no_decay], **settings)


def profiler(cuda):
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))


def write_step_trace(tracing, path, step, rank, device, step_s):
    """The profiled step summed by event name, in poplar-worker --trace's format: libtorch's
    own events (kineto_results), as the worker reads them in C++."""
    totals = {}
    device_events = 0
    events = tracing.profiler.kineto_results.events()
    # Kineto's device-side copies of host ranges (record_function's) are not kernels: they
    # carry a host event's name, which no kernel has (as the worker leaves them out).
    host_names = {event.name() for event in events if str(event.device_type()).endswith("CPU")}
    for event in events:
        on = str(event.device_type()).split(".")[-1].lower()  # DeviceType.CUDA -> cuda
        if on != "cpu" and event.name() in host_names:
            continue
        device_events += on != "cpu"
        seconds = event.duration_ns() * 1e-9 if hasattr(event, "duration_ns") else event.duration_us() * 1e-6
        total = totals.setdefault((on, event.name()), [0, 0.0])
        total[0] += 1
        total[1] += seconds
    events = [{"name": name, "on": on, "count": count, "total_s": seconds}
              for (on, name), (count, seconds) in sorted(totals.items(), key=lambda item: -item[1][1])]
    with open(path + ".tmp", "w") as out:
        json.dump({"step": step, "rank": rank, "device": str(device), "libtorch": torch.__version__,
                   "step_s": step_s, "device_events": device_events, "events": events}, out, indent=1)
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["ddp", "zero1", "fsdp"], required=True)
    parser.add_argument("--model-config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--checkpoint-blocks", action="store_true",
                        help="recompute each block's activations in backward")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per rank")
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--trace", help="rank 0 profiles one step and writes its summary here")
    parser.add_argument("--trace-step", type=int, default=3, help="the step --trace profiles (its last if fewer)")
    args = parser.parse_args()
    if args.trace_step < 1:
        parser.error(f"--trace-step must be 1 or more, got {args.trace_step}")
    cuda = args.device == "cuda"
    if args.mode == "fsdp" and not cuda:
        sys.exit("train_pytorch: --mode fsdp needs --device cuda")
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(args.threads)
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    # The classic TCPStore server, as poplar-worker uses: builds without libuv (Debian's
    # torch 2.x) refuse the libuv one that torch 2.4+ picks by default.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = ref.load_config(args.model_config)
    torch.manual_seed(1337)
    model = ref.make_model(config).to(device)
    bf16 = args.precision == "bf16"
    wrapped = wrap(model, args.mode, device, bf16, ref.layer_class(config))
    if args.checkpoint_blocks:
        checkpoint_blocks(wrapped, ref.layer_class(config))
    opt = optimizer(wrapped, args.mode, args.lr, fused=cuda)
    autocast = (functools.partial(torch.autocast, device.type, dtype=torch.bfloat16)
                if bf16 and args.mode != "fsdp" else contextlib.nullcontext)
    tokens = ref.Tokens(args.data, config["block_size"])
    share = args.global_batch // world
    out = open(args.metrics, "w") if rank == 0 else None
    traced = min(args.trace_step, args.steps) - 1 if args.trace and rank == 0 else -1
    for step in range(args.steps):
        synchronize()
        tracing = profiler(cuda) if step == traced else None
        if tracing:
            tracing.start()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        first = step * args.global_batch + rank * share
        total = torch.zeros((), dtype=torch.float64, device=device)
        starts = list(range(0, share, args.micro_batch))
        for i, offset in enumerate(starts):
            count = min(args.micro_batch, share - offset)
            x, y = (t.to(device, non_blocking=True) for t in tokens.batch(first + offset, count))
            last = i == len(starts) - 1
            # DDP reduces once, after the last micro-batch (as poplar's stages 0-1). FSDP
            # reduces every micro-batch, as ZeRO-3 and poplar's stage 3 reduce-scatter every
            # round; its no_sync() keeps whole unsharded gradients instead, and in PyTorch
            # 2.11 fails with bf16 mixed precision ("a gradient with dtype BFloat16 to a
            # tensor with grad_dtype Float").
            with wrapped.no_sync() if not last and args.mode != "fsdp" else contextlib.nullcontext():
                with autocast():
                    logits = wrapped(x)
                    loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), reduction="sum")
                # DDP and FSDP average over ranks; scale so the result is the global mean.
                (loss * world / (args.global_batch * tokens.L)).backward()
            total += loss.detach()
        if args.mode == "fsdp":
            wrapped.clip_grad_norm_(1.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dist.all_reduce(total)
        mean_loss = total.item() / (args.global_batch * tokens.L)  # waits for the device
        elapsed = time.perf_counter() - start
        if tracing:
            synchronize()
            tracing.stop()
            write_step_trace(tracing, args.trace, step + 1, rank, device, elapsed)
        if out:
            out.write(json.dumps({"step": step + 1, "loss": mean_loss, "step_s": elapsed,
                                  "tokens_per_s": args.global_batch * tokens.L / elapsed}) + "\n")
            out.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
