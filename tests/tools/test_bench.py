"""``course bench``: the FLOP formula against FlopCounterMode, the weight-copy parity check of
each pair, the command end to end at tiny sizes (table and JSON), its errors, the matmul
peak. No test asserts on a time: speed is what the benchmark reports, not what CI checks."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

pytest.importorskip("transformers")

from course_lib.models.bert import BertConfig, BertForPreTraining
from course_lib.tools import bench, bench_models
from course_lib.tools.bench import matmul_peak, time_interleaved
from course_lib.tools.bench_models import (
    COURSE_STEP_OPTIONS,
    MODELS,
    BenchShape,
    ParityError,
    build_pair,
    check_parity,
    count_flops,
    make_batch,
    training_flops,
)

TINY = BenchShape(batch=2, seq=16, layers=2, hidden=32, heads=4, vocab=100)
TINY_ARGS = ["--batch", "2", "--seq", "16", "--layers", "2", "--hidden", "32", "--heads", "4"]
TINY_ARGS += ["--vocab", "100", "--repeats", "1", "--peak-n", "64"]


def test_training_flops_matches_flop_counter_on_a_tiny_bert():
    """The formula against torch's FlopCounterMode on one forward + backward (exact here: the
    attention runs through bmm; within 10% whatever the kernel)."""
    config = BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48
    )
    model = BertForPreTraining(config).train()
    b, s = 3, 12
    ids = torch.randint(5, 120, (b, s))
    labels = torch.full_like(ids, -100)
    labels[:, [1, 5]] = ids[:, [1, 5]]  # P = 2 labelled positions per sequence

    def step() -> None:
        nsp = torch.tensor([0, 1, 0])
        model(input_ids=ids, labels=labels, next_sentence_label=nsp, masked_only=True).loss.backward()

    counted = count_flops(step)
    assert counted > 0
    assert training_flops(config, b, s, num_predict=2) == pytest.approx(counted, rel=0.10)
    # linear in the batch, quadratic terms in the length
    assert training_flops(config, 2 * b, s) == 2 * training_flops(config, b, s)
    assert training_flops(config, b, 2 * s) > 2 * training_flops(config, b, s)


@pytest.mark.parametrize("name", MODELS)
def test_training_flops_matches_flop_counter_for_every_benchmarked_step(name):
    """The benchmark's own step of each model (XLNet's two streams and partial prediction too)."""
    ours, _ = build_pair(name, TINY)
    batch = make_batch(name, TINY)
    counted = count_flops(lambda: ours(**batch, **COURSE_STEP_OPTIONS.get(name, {})).loss.backward())
    assert training_flops(ours.config, TINY.batch, TINY.seq, num_predict=TINY.num_predict) == pytest.approx(
        counted, rel=0.05
    )


@pytest.mark.parametrize("name", MODELS)
def test_weight_copy_parity_and_it_is_not_vacuous(name):
    ours, hf = build_pair(name, TINY)
    assert ours.training and hf.training
    batch = make_batch(name, TINY)
    diffs = check_parity(name, ours, hf, batch)
    assert diffs["loss"] <= 1e-4 and diffs["logits"] <= 1e-4
    assert ours.training and hf.training  # put back in training mode
    with torch.no_grad():  # a different weight on one side must be caught
        weight = next(p for n, p in ours.named_parameters() if "word_emb" in n)
        weight.add_(0.1 * torch.randn_like(weight))
    with pytest.raises(ParityError, match=name):
        check_parity(name, ours, hf, batch)


def test_batches_hold_the_objectives():
    shape = BenchShape(batch=3, seq=20, layers=1, hidden=16, heads=2, vocab=50)
    k = shape.num_predict
    mlm = make_batch("bert", shape)
    chosen = mlm["labels"] != -100
    assert (chosen.sum(dim=1) == k).all()
    assert (mlm["input_ids"][chosen] == bench_models.MASK_ID).all()
    assert "next_sentence_label" in mlm and "sentence_order_label" in make_batch("albert", shape)
    x = make_batch("xlnet", shape)
    assert x["perm_mask"].shape == (3, 20, 20) and x["target_mapping"].shape == (3, k, 20)
    targets = x["target_mapping"].argmax(dim=-1)
    assert torch.equal(x["labels"], x["input_ids"].gather(1, targets))
    is_target = x["target_mapping"].sum(dim=1).bool()  # [b, s]
    diag = x["perm_mask"].diagonal(dim1=1, dim2=2).bool()
    assert torch.equal(diag, is_target)  # a target never sees itself, a non-target does
    assert not x["perm_mask"][~is_target[:, None, :].expand(3, 20, 20)].any()  # non-targets seen by all


def test_time_interleaved_alternates_the_sides():
    calls: list[str] = []
    times = time_interleaved([lambda: calls.append("a"), lambda: calls.append("b")], 3, warmup=1)
    assert calls == ["a", "b"] * 4
    assert [len(t) for t in times] == [3, 3] and all(t >= 0 for ts in times for t in ts)


@pytest.fixture
def restore_threads():
    """``--threads`` sets torch's thread count for the process: put it back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_main_prints_the_table_and_writes_json(tmp_path, capsys, restore_threads):
    out_json = tmp_path / "sub" / "bench.json"
    # one thread: tiny steps are all overhead, and two threads on a busy machine wait on each other
    assert bench.main([*TINY_ARGS, "--threads", "1", "--json", str(out_json)]) == 0
    assert torch.get_num_threads() == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "torch" in lines[0] and "transformers" in lines[0] and "threads" in lines[0]
    table = [line for line in lines if line.startswith("|")]
    assert table[0].startswith("| model | params | course ms/step | HF ms/step | ratio")
    assert [row.split("|")[1].strip() for row in table[2:]] == list(MODELS)
    data = json.loads(out_json.read_text())
    assert [r["model"] for r in data["models"]] == list(MODELS)
    assert data["shape"]["batch"] == 2 and data["threads"] == 1 and data["matmul_peak_flops_per_s"] > 0
    for r in data["models"]:
        for key in (
            "course_s",
            "hf_s",
            "ratio",
            "tokens_per_s_course",
            "flops_per_s_hf",
            "peak_fraction_course",
        ):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert r["params"] > 0 and r["flops_per_step"] > 0
        assert max(r["parity_max_abs_diff"].values()) <= 1e-4
        assert len(r["course_times_s"]) == len(r["hf_times_s"]) == 1
    assert not list(out_json.parent.glob(".*.tmp"))  # written atomically, nothing left over


def test_compile_compiles_both_sides_and_reports_the_first_step(
    tmp_path, capsys, monkeypatch, restore_threads
):
    """--compile hands course_lib's and Hugging Face's models alike to torch.compile (a real
    compile takes minutes on a CPU, so a recording stand-in here), after the parity checks;
    the first step of each side is timed on its own and named beside the table; without the
    option nothing is compiled and the report has no such line."""
    compiled = []

    def fake_compile(model):
        compiled.append(type(model).__module__.split(".")[0])
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    out_json = tmp_path / "bench.json"
    argv = [*TINY_ARGS, "--threads", "1", "--models", "bert,xlnet", "--json", str(out_json)]
    assert bench.main([*argv, "--compile"]) == 0
    assert compiled == ["course_lib", "transformers"] * 2
    out = capsys.readouterr().out
    assert "both sides compiled with torch.compile" in out and "bert course" in out and "xlnet course" in out
    data = json.loads(out_json.read_text())
    assert data["compile"] is True
    assert all(r["first_step_s_course"] > 0 and r["first_step_s_hf"] > 0 for r in data["models"])
    compiled.clear()
    assert bench.main(argv) == 0
    assert compiled == [] and "compiled" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--models", "bert,gpt2"], ["gpt2", "bert, albert, xlnet"]),
        (["--models", ""], ["--models", "bert, albert, xlnet"]),
        (["--hidden", "30", "--heads", "4"], ["--hidden 30", "--heads 4"]),
        (["--repeats", "0"], ["--repeats"]),
        (["--device", "nonsense"], ["--device 'nonsense'"]),
        # output paths are checked before the timing, not after it (a traceback then)
        (["--json", "/"], ["--json / is a folder; give a file"]),
        (["--markdown", f"{__file__}/x.md"], ["--markdown", "test_bench.py is a file"]),
        (["--json", ""], ["--json is empty"]),
        (["--intermediate", "0"], ["--intermediate must be positive"]),  # the option, not the field
        (["--json", "r.md", "--markdown", "r.md"], ["--json and --markdown name the same file"]),
        # the same file written two ways (a review: the JSON was lost under the Markdown)
        (
            ["--json", os.path.abspath("r.md"), "--markdown", "r.md"],
            ["--json and --markdown name the same file"],
        ),
    ],
)
def test_bad_input_is_a_clear_error(argv, words, capsys):
    assert bench.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("course bench: ")
    for w in words:
        assert w in err


def test_registers_as_a_subcommand(capsys):
    parser = argparse.ArgumentParser(prog="course")
    bench.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--models", "roberta"])
    assert args.func(args) == 2
    assert "roberta" in capsys.readouterr().err


@pytest.mark.parametrize("name", MODELS)
def test_the_recorded_work_is_the_steps_and_replay_does_it_all(name):
    """record_step sees every product of a step, forward and backward (its FLOPs are
    FlopCounterMode's where no fused attention kernel hides some: the training step on the CPU
    with dropout; ALBERT v2 has no attention dropout, so SDPA's fused kernel hides its
    attention products), and every dropout's draw (one per dropout call, each of the
    dropout's probability); time_replay replays each as often as it ran, on tensors of the
    recorded strides."""
    ours, _ = build_pair(name, TINY)
    batch = make_batch(name, TINY)
    ours.train()

    def step() -> None:
        ours(**batch, **COURSE_STEP_OPTIONS.get(name, {})).loss.backward()

    work = bench.record_step(step)
    recorded = sum(count * bench._gemm_flops(key[0], key[1]) for key, count in work["gemm"].items())
    counted = count_flops(step)
    if name == "albert":
        assert 0.8 * counted < recorded < counted
    else:
        assert recorded == counted
    layouts = [(shapes, strides) for _, shapes, strides, *_ in work["gemm"]]
    assert any(
        strides != tuple(torch.empty(shape).stride() for shape in shapes) for shapes, strides in layouts
    )
    draws = work["draw"]
    rates = {m.p for m in ours.modules() if isinstance(m, torch.nn.Dropout)}
    rates |= {m.dropout for m in ours.modules() if isinstance(getattr(m, "dropout", None), float)}
    assert draws and {round(1 - key[3][0], 6) for key in draws} <= {round(p, 6) for p in rates if p > 0}
    seconds, flops = bench.time_replay(work["gemm"], torch.device("cpu"), repeats=1)
    assert seconds > 0 and flops == recorded
    seconds, flops = bench.time_replay(draws, torch.device("cpu"), repeats=1)
    assert seconds > 0 and flops == 0
    # one product by hand: addmm of (bias, a, b) is 2 m k n; bmm 2 b m k n
    assert bench._gemm_flops("addmm", [(5,), (3, 4), (4, 5)]) == 2 * 3 * 4 * 5
    assert bench._gemm_flops("bmm", [(2, 3, 4), (2, 4, 5)]) == 2 * 2 * 3 * 4 * 5


def test_matmul_peak_is_positive():
    peak = matmul_peak("cpu", torch.float32, n=64, repeats=2)
    assert math.isfinite(peak) and peak > 0


# --- a sound bench: gradients checked, spread shown, peak interleaved, machine and load named ---


@pytest.mark.parametrize("name", MODELS)
def test_gradients_are_compared_before_timing_and_a_wrong_gradient_stops_the_run(name):
    shape = BenchShape(batch=2, seq=16, layers=1, hidden=32, heads=4, vocab=100)
    ours, hf = bench_models.build_pair(name, shape)
    batch = make_batch(name, shape)
    assert bench_models.check_gradients(name, ours, hf, batch) <= bench_models.GRAD_TOL
    assert all(p.grad is None for p in ours.parameters()) and ours.training  # left clean
    # the same forward pass, a wrong backward pass for one matrix: the forward check cannot see it
    target_name, target = [(n, p) for n, p in ours.named_parameters() if p.dim() == 2][-1]
    target.register_hook(lambda g: 1.5 * g)
    with pytest.raises(bench_models.ParityError, match=f"gradients disagree: {target_name}"):
        bench_models.check_gradients(name, ours, hf, batch)


def test_spread_and_the_markdown_report(tmp_path, capsys, restore_threads):
    sp = bench.spread([3.0, 1.0, 2.0, 10.0])
    assert sp["median"] == 2.5 and sp["min"] == 1.0 and sp["max"] == 10.0 and sp["q1"] <= sp["q3"]
    assert bench.spread([4.0]) == {"median": 4.0, "q1": 4.0, "q3": 4.0, "min": 4.0, "max": 4.0}
    md = tmp_path / "bench.md"
    argv = [*TINY_ARGS, "--repeats", "3", "--threads", "1", "--models", "bert", "--markdown", str(md)]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    text = md.read_text()
    assert text.startswith(bench.GENERATED_NOTE) and text[len(bench.GENERATED_NOTE) :].strip() == out.strip()
    assert "load average (1/5/15 min)" in out and "1 torch threads" in out and "interleaved" in out
    header = [line for line in out.splitlines() if line.startswith("| model")][0]
    columns = ("course ms IQR", "HF ms min-max", "ratio IQR (paired steps)", "peak GFLOP/s (interleaved)")
    columns += ("course ms in matrix products alone", "% of peak, matrix products alone")
    columns += ("course ms in dropout draws alone", "% of peak, products and draws alone")
    for column in columns:
        assert column in header
    row = [line for line in out.splitlines() if line.startswith("| bert")][0]
    assert len(row.split("|")) == len(header.split("|"))


def test_the_appendix_table_is_the_generated_report_of_a_run():
    """The training appendix includes benchmarks/bench_cpu.md, which is describe_run() of the JSON
    of the same run: regenerate both with the command the appendix gives, never edit them."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "book" / "appendix_training.md").read_text()
    assert "| bert |" not in page  # no table typed into the page
    for name, dropout in (("bench_cpu", None), ("bench_cpu_nodropout", 0.0)):
        assert f"```{{include}} ../benchmarks/{name}.md" in page
        assert f"--json benchmarks/{name}.json --markdown benchmarks/{name}.md" in page
        result = json.loads((root / "benchmarks" / f"{name}.json").read_text())
        assert result["shape"]["dropout"] == dropout  # the run the page says it is
        text = (root / "benchmarks" / f"{name}.md").read_text()
        assert text == bench.GENERATED_NOTE + bench.describe_run(result) + "\n"


@pytest.mark.parametrize("name", MODELS)
def test_dropout_option_sets_every_rate_on_both_sides(name):
    """--dropout 0 turns off every dropout of both models (what its random numbers cost is the
    difference); the default keeps the configurations' own rates; a bad rate is refused."""
    off = BenchShape(batch=2, seq=16, layers=1, hidden=32, heads=4, vocab=100, dropout=0.0)
    ours, hf = bench_models.build_pair(name, off)
    rates = [m.p for m in ours.modules() if isinstance(m, torch.nn.Dropout)]
    rates += [m.dropout for m in ours.modules() if isinstance(getattr(m, "dropout", None), float)]
    rates += [m.p for m in hf.modules() if isinstance(m, torch.nn.Dropout)]
    assert rates and all(r == 0.0 for r in rates)
    batch = make_batch(name, off)
    torch.manual_seed(0)  # training mode, no dropout: two calls agree exactly
    first = ours(**batch).loss
    assert torch.equal(first, ours(**batch).loss)
    default, _ = bench_models.build_pair(name, TINY)
    if name != "albert":  # ALBERT v2 has no hidden or attention dropout by default
        assert any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in default.modules())
    with pytest.raises(ValueError, match="--dropout must be in"):
        BenchShape(dropout=1.5).validate()
