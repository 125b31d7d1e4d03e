#!/usr/bin/env python3
"""Step traces (poplar-worker train --trace, train_pytorch.py --trace) side by side.

A trace sums one training step's profiler events by name (launcher/worker/step_trace.h). This
puts the device's kernels into kinds (matrix products, attention, ...) and sets two
traces against each other kernel by kernel, so that a gap in step time between two
systems shows where on the device it is:
    scripts/gpu/step_traces.py A.json B.json [--top 15]
Where a trace has no device events (a CPU run; a libtorch without Kineto) its host
operators stand in, which nest: their times overlap and do not add up to the step.
"""
import argparse
import json
import sys

# A kernel's kind: the first whose words appear in its lower-cased name, so the order
# matters: attention's kernels are built on CUTLASS (flash_fwd_kernel<...cutlass::...>,
# fmha_cutlassF_*) and come before the matrix products; the fused AdamW and PyTorch's
# gradient norm run as multi_tensor_apply kernels, poplar's norm as a cuBLAS dot. On the
# H200 (PyTorch 2.11) attention is cuDNN's (cudnn_generated_fort_native_sdpa_*_flash_*,
# with cudnn::fusion helpers in its backward) and cuBLAS's products are nvjet_*; other
# names are as read from PyTorch's and cuBLAS's sources. "copy" is Kineto's Memcpy and
# Memset and copying kernels, dtype casts among them.
KINDS = [("attention", ("flash", "fmha", "attention", "attn", "cudnn::fusion")),
         ("optimizer", ("adam",)),
         ("gradient norm", ("lpnorm", "normtwo", "dot_kernel", "reduce_1block")),
         ("matmul", ("gemm", "nvjet", "xmma", "cutlass", "cublas")),
         ("communication", ("nccl",)),
         ("copy", ("memcpy", "memset", "copy")),
         ("norm, softmax, loss", ("layer_norm", "layernorm", "gammabeta", "softmax", "cross_entropy", "nll_loss")),
         ("elementwise", ("elementwise", "vectorized", "unrolled", "multi_tensor_apply", "gelu", "reduce"))]
OTHER = "other"
KIND_NAMES = [name for name, _ in KINDS] + [OTHER]


def load(path):
    with open(path) as f:
        trace = json.load(f)
    for key in ("step", "step_s", "device_events", "events"):
        if key not in trace:
            sys.exit(f"step_traces: {path}: no '{key}': not a step trace (poplar-worker train --trace)")
    return trace


def kind_of(name):
    lowered = name.lower()
    for kind, words in KINDS:
        if any(word in lowered for word in words):
            return kind
    return OTHER


def timed_events(trace, device=None):
    """The device's events (kernels, whose times add up), or the host's where `device` is
    False or, by default, the trace has no device events."""
    if device is None:
        device = bool(trace["device_events"])
    return [e for e in trace["events"] if (e["on"] != "cpu") == device]


def summary(trace, top=25):
    """Step time, the device's summed kernel time, by kind too, and the longest events.
    Kernels on several streams may overlap: their sum can pass the step's time."""
    events = timed_events(trace)
    result = {"step_s": trace["step_s"], "device_s": None, "kernels": None, "kinds_s": None,
              "top": [{k: e[k] for k in ("name", "on", "count", "total_s")} for e in events[:top]]}
    if trace["device_events"]:
        kinds = {kind: 0.0 for kind in KIND_NAMES}
        for event in events:
            kinds[kind_of(event["name"])] += event["total_s"]
        result.update(device_s=sum(e["total_s"] for e in events), kernels=sum(e["count"] for e in events),
                      kinds_s=kinds)
    return result


def differences(a, b, top=15):
    """Events by name, a's total against b's, the largest differences first: kernels where
    both traces have them, else host operators of both (never one's against the other's)."""
    device = bool(a["device_events"]) and bool(b["device_events"])
    totals = {}
    for side, trace in ((0, a), (1, b)):
        for event in timed_events(trace, device):
            entry = totals.setdefault(event["name"], [0.0, 0.0, 0, 0])
            entry[side] += event["total_s"]
            entry[2 + side] += event["count"]
    rows = sorted(totals.items(), key=lambda item: -abs(item[1][0] - item[1][1]))
    return [{"name": name, "a_s": ta, "b_s": tb, "a_count": ca, "b_count": cb}
            for name, (ta, tb, ca, cb) in rows[:top]]


def ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def short(name, width=90):
    return name if len(name) <= width else name[:width - 3] + "..."


def kinds_table(named_summaries):
    """One row per trace: step time, summed kernel time and its kinds, in ms."""
    headers = ["system", "step ms", "kernels ms", *KIND_NAMES]
    rows = []
    for name, s in named_summaries:
        kinds = s["kinds_s"] or {}
        rows.append([name, ms(s["step_s"]), ms(s["device_s"]), *(ms(kinds.get(k)) for k in KIND_NAMES)])
    return headers, rows


def differences_table(rows, a_name, b_name):
    headers = [f"{a_name} ms", f"{b_name} ms", "difference", "count", "event"]
    return headers, [[ms(r["a_s"]), ms(r["b_s"]), ms(r["a_s"] - r["b_s"]), f"{r['a_count']}/{r['b_count']}",
                      short(r["name"])] for r in rows]


def table(headers, rows):
    """Plain-text columns, right-aligned but the last (names, left-aligned); also gpu_runs'."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).rjust(w) if i < len(cells) - 1 else str(c)
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="a step trace")
    parser.add_argument("b", help="the trace to set it against")
    parser.add_argument("--top", type=int, default=15, help="events listed by difference")
    args = parser.parse_args()
    a, b = load(args.a), load(args.b)
    print(table(*kinds_table([(args.a, summary(a)), (args.b, summary(b))])))
    print()
    print(table(*differences_table(differences(a, b, args.top), "a", "b")))


if __name__ == "__main__":
    main()
