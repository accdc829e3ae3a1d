"""Precision mode of tools/bench.py (``--precision fp32,bf16``): what bf16 buys, per model and system, measured
in one run so that the ratios can be trusted on a shared machine.

Each (model, system, rank count) runs in float32 and in bf16 in interleaved rounds: each round runs every
configuration once in each precision (a fresh job each, one timed repeat), so a noisy minute hits both
alike. The speed-up of a round is the float32 step time over the bf16 one, both from that round; the report
gives its median and spread over rounds.

What bf16 means per system:
  ngraph-cpu, ngraph-ccl, ngraph-interp  paddle_ngraph's ``precision: bf16`` (O1: matmuls and convolutions in
                 bf16, float32 master weights). On a CPU without avx512_bf16 the CPU backend runs float32 and
                 says so: the report's note column carries that reason, so a ratio near 1 is read as such.
  torch-ddp      torch's own CPU mixed precision, ``torch.autocast("cpu", dtype=torch.bfloat16)`` around the
                 forward and the loss (the peer bf16 is compared with), float32 parameters and optimizer.
Paddle's own executor and paddle.DataParallel are not run in bf16: Paddle 3.3.1's bf16 matmul and conv2d are
oneDNN kernels that need AVX512 (../shared/notes/platform.md), and its plain CPU kernels have none.
"""
import numpy as np

from bench_scaling import interleaved_rounds, paired_rounds

PRECISION_SYSTEMS = ["ngraph-cpu", "torch-ddp"]
BF16_CAPABLE = {"ngraph-cpu", "ngraph-ccl", "ngraph-interp", "torch-ddp"}
PRECISIONS = ("fp32", "bf16")


def run_precision(models, systems, ranks, args, run_once, unsupported) -> dict:
    """Interleaved rounds of every (model, system, ranks, precision); returns the report's "precision" section."""
    configs, skipped = [], {}
    for model in models:
        for system in systems:
            for n in ranks:
                reason = unsupported(system, model, n)
                if reason is None and system not in BF16_CAPABLE:
                    reason = (f"{system} has no bf16 training on CPU here (Paddle's bf16 matmul and conv2d need "
                              "AVX512 oneDNN kernels)")
                if reason:
                    skipped[(model, system, n)] = reason
                else:
                    configs.append((model, system, n))
    jobs = [(config, p) for config in configs for p in PRECISIONS]
    runs = interleaved_rounds(jobs, args.rounds, lambda job: f"{job[0][0]} {job[0][1]} {job[0][2]} rank(s) {job[1]}",
                              lambda job: run_once(job[0][1], job[0][0], job[0][2], args, precision=job[1]))
    rows = []
    for model in models:
        for system in systems:
            for n in ranks:
                row = {"model": model, "system": system, "ranks": n}
                if (model, system, n) in skipped:
                    rows.append({**row, "status": "not run", "reason": skipped[(model, system, n)]})
                    continue
                key = (model, system, n)
                row.update(summarize_precision(runs[(key, "fp32")], runs[(key, "bf16")]))
                rows.append(row)
    return {"rounds": args.rounds, "rows": rows}


def summarize_precision(fp32_runs, bf16_runs) -> dict:
    pairs, failure = paired_rounds(fp32_runs, bf16_runs)
    if failure:
        return failure
    fp32 = [f["ms_per_step"] for f, _ in pairs]
    bf16 = [b["ms_per_step"] for _, b in pairs]
    speedup = [f / b for f, b in zip(fp32, bf16)]
    notes = sorted({b["precision_note"] for _, b in pairs if b.get("precision_note")})
    return {"status": "ok", "rounds_ok": len(pairs), "fp32_ms": float(np.median(fp32)),
            "fp32_spread": [float(min(fp32)), float(max(fp32))], "bf16_ms": float(np.median(bf16)),
            "bf16_spread": [float(min(bf16)), float(max(bf16))], "speedup": float(np.median(speedup)),
            "speedup_spread": [float(min(speedup)), float(max(speedup))], "note": "; ".join(notes)}


def precision_lines(section: dict) -> list[str]:
    """The precision table as Markdown lines."""
    lines = [f"Precision: float32 against bf16 per model and system; {section['rounds']} interleaved rounds, medians "
             "and min-max over rounds; speed-up = fp32 ms / bf16 ms within a round.", "",
             "| model | system | ranks | fp32 ms/step (spread) | bf16 ms/step (spread) | bf16 speed-up (spread) | note |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in section["rows"]:
        if row["status"] != "ok":
            lines.append(f"| {row['model']} | {row['system']} | {row['ranks']} | {row['status']}: "
                         f"{row['reason'][:160]} | | | |")
            continue
        lines.append(f"| {row['model']} | {row['system']} | {row['ranks']} | {row['fp32_ms']:.2f} "
                     f"({row['fp32_spread'][0]:.2f}-{row['fp32_spread'][1]:.2f}) | {row['bf16_ms']:.2f} "
                     f"({row['bf16_spread'][0]:.2f}-{row['bf16_spread'][1]:.2f}) | {row['speedup']:.2f}x "
                     f"({row['speedup_spread'][0]:.2f}-{row['speedup_spread'][1]:.2f}) | {row['note']} |")
    return lines
