"""Forward-pass speed: course_lib's BertModel vs Hugging Face's (SDPA attention), on all-MiniLM-L6-v2.

    python benchmarks/bench_bert.py [--batch 32] [--seq 128] [--repeats 10] [--threads N]

Both models hold the same weights (checked before timing). Two batches are timed: every
sequence full length, and a padded batch (lengths spread from seq/4 to seq). Prints the
median time of each and the ratio course_lib / Hugging Face (below 1: course_lib is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch


def median_times(fns, repeats: int) -> list[float]:
    """Median seconds per call of each function, calls interleaved so load changes hit all alike."""
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers

    from course_lib.data.minilm import minilm_dir
    from course_lib.pretrained import load_minilm

    ours, _ = load_minilm()
    hf = transformers.BertModel.from_pretrained(str(minilm_dir()), attn_implementation="sdpa").eval()

    g = torch.Generator().manual_seed(0)
    b, n = args.batch, args.seq
    ids = torch.randint(1000, 30000, (b, n), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102
    full = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    lengths = torch.linspace(n // 4, n, b).long()
    mask = (torch.arange(n)[None, :] < lengths[:, None]).long()
    padded = {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    print(
        f"all-MiniLM-L6-v2, batch {b} x {n} tokens, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    for name, batch in (("full length", full), ("padded", padded)):
        with torch.inference_mode():
            diff = (ours(**batch).last_hidden_state - hf(**batch).last_hidden_state).abs().max().item()
            t_ours, t_hf = median_times([lambda: ours(**batch), lambda: hf(**batch)], args.repeats)
        print(
            f"{name:12s} course_lib {t_ours * 1000:8.1f} ms   HF sdpa {t_hf * 1000:8.1f} ms   "
            f"ratio {t_ours / t_hf:5.2f}   (max |diff| {diff:.1e})"
        )


if __name__ == "__main__":
    main()
