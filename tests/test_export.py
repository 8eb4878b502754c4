"""``course export``: models trained by ``course train`` leave the course as Hugging Face
folders that ``transformers`` loads (Auto classes, tokenizer, fill-mask pipeline) with the
course model's logits."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch

from course_lib.cli import main

transformers = pytest.importorskip("transformers")

TRAIN = ["--data", "generated", "--size", "tiny", "--n-docs", "40", "--batch-size", "8", "--steps", "3"]
SENTENCES = ["the cat sat on the mat.", "a dog ran"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """objective -> (course model folder, exported folder), exported under umask 022."""
    root = tmp_path_factory.mktemp("export")
    out = {}
    old = os.umask(0o022)
    try:
        for objective in ("bert", "roberta", "albert", "causal", "xlnet"):
            model, hf = root / objective, root / f"{objective}-hf"
            assert main(["train", objective, *TRAIN, "--out", str(model)]) == 0
            assert main(["export", str(model), str(hf)]) == 0
            out[objective] = (model, hf)
    finally:
        os.umask(old)
    return out


def _logits(objective: str, model_dir: Path, hf_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    from course_lib.export import _load

    ours = _load(model_dir)
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    enc = tok(SENTENCES, return_tensors="pt", padding=True)
    cls = {
        "causal": transformers.AutoModelForCausalLM,
        "xlnet": transformers.XLNetLMHeadModel,
    }.get(objective, transformers.AutoModelForMaskedLM)
    theirs = cls.from_pretrained(hf_dir).eval()
    kw = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    with torch.no_grad():
        a, b = ours(**kw), theirs(**kw)
    mine = getattr(a, "mlm_logits", None)
    return (a.logits if mine is None else mine), b.logits


@pytest.mark.parametrize("objective", ["bert", "roberta", "albert", "causal", "xlnet"])
def test_transformers_loads_the_export_with_the_course_logits(exported, objective):
    model_dir, hf_dir = exported[objective]
    config = transformers.AutoConfig.from_pretrained(hf_dir)
    assert config.model_type == {"albert": "albert", "xlnet": "xlnet"}.get(objective, "bert")
    assert config.architectures
    if objective in ("bert", "roberta", "albert", "causal", "xlnet"):
        transformers.AutoModel.from_pretrained(hf_dir)  # the bare body loads too
    ours, theirs = _logits(objective, model_dir, hf_dir)
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() <= 1e-5


@pytest.mark.parametrize("objective", ["bert", "roberta", "albert"])
def test_the_fill_mask_pipeline_runs_on_the_export(exported, objective):
    _, hf_dir = exported[objective]
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tok.mask_token is not None and tok.pad_token is not None
    fill = transformers.pipeline("fill-mask", model=str(hf_dir))
    top = fill(f"the {tok.mask_token} sat on the mat.")
    assert len(top) == 5 and all(0 <= t["score"] <= 1 for t in top)


def test_exported_and_trained_files_follow_the_umask(exported):
    model_dir, hf_dir = exported["bert"]
    for f in [*hf_dir.iterdir(), model_dir / "model.safetensors", model_dir / "config.json"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f


def test_a_model_transformers_has_no_class_for_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"architecture": "ElmoLanguageModel"}))
    assert main(["export", str(tmp_path / "m"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "ElmoLanguageModel" in err and len(err.splitlines()) == 1
    assert main(["export", str(tmp_path / "missing"), str(tmp_path / "out")]) == 2


def test_the_roberta_export_masks_as_hugging_faces_roberta(exported):
    """RoBERTa's ``<mask>`` takes the space before it (``lstrip``), as Hugging Face's RoBERTa
    tokenizer has it: " <mask>" in a text becomes the mask alone, not a lone space token and
    the mask, and the pipeline's predictions fill the gap with a word that carries its space."""
    _, hf_dir = exported["roberta"]
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tok.mask_token == "<mask>" and tok.added_tokens_decoder[tok.mask_token_id].lstrip
    with_mask = tok("the cat <mask> on the mat.")["input_ids"]
    without = tok("the cat on the mat.")["input_ids"]
    assert len(with_mask) == len(without) + 1 and with_mask.count(tok.mask_token_id) == 1
    space = tok.convert_tokens_to_ids("Ġ")
    where = with_mask.index(tok.mask_token_id)
    assert with_mask[where - 1] != space  # the control below shows the space token would be there
    plain = json.loads((hf_dir / "tokenizer.json").read_text())
    for t in plain["added_tokens"]:
        if t["content"] == "<mask>":
            t["lstrip"] = False
    from tokenizers import Tokenizer

    unstripped = Tokenizer.from_str(json.dumps(plain)).encode("the cat <mask> on the mat.").ids
    assert unstripped[unstripped.index(tok.mask_token_id) - 1] == space
    fill = transformers.pipeline("fill-mask", model=str(hf_dir))
    top = fill("the cat <mask> on the mat.")
    assert len(top) == 5 and all(t["sequence"].startswith("the cat") for t in top)
    # the BERT export's [MASK] keeps its WordPiece behaviour
    bert = transformers.AutoTokenizer.from_pretrained(exported["bert"][1])
    assert not bert.added_tokens_decoder[bert.mask_token_id].lstrip


@pytest.mark.parametrize("objective", ["bert", "roberta", "albert", "causal", "xlnet"])
def test_a_sentence_pair_reads_as_in_training(exported, objective):
    """The exported tokenizer returns ``token_type_ids`` (segment 1 for a pair's B, as the
    course's tokenizer gives it), so the exported model scores a pair as the course model
    does. Control: without them (what a tokenizer without ``model_input_names`` gave) the
    outputs differ for every model that has segment embeddings."""
    from course_lib.export import _load
    from course_lib.recipes.common import load_pretrained

    model_dir, hf_dir = exported[objective]
    ours, tok = load_pretrained(model_dir)
    ht = transformers.AutoTokenizer.from_pretrained(hf_dir)
    a, b = SENTENCES
    enc, he = tok.encode(a, b), ht(a, b, return_tensors="pt")
    assert he["input_ids"][0].tolist() == enc.ids and he["token_type_ids"][0].tolist() == enc.type_ids
    cls = {"causal": transformers.AutoModelForCausalLM, "xlnet": transformers.XLNetLMHeadModel}.get(
        objective, transformers.AutoModelForMaskedLM
    )
    theirs, ours = cls.from_pretrained(hf_dir).eval(), _load(model_dir)
    kw = {"input_ids": torch.tensor([enc.ids]), "token_type_ids": torch.tensor([enc.type_ids])}
    with torch.no_grad():
        mine, hf = ours(**kw), theirs(**he)
        no_types = theirs(input_ids=he["input_ids"], attention_mask=he["attention_mask"]).logits
    mine = mine.logits if getattr(mine, "mlm_logits", None) is None else mine.mlm_logits
    assert (mine - hf.logits).abs().max().item() <= 1e-5
    # RoBERTa's pairs are one segment (nothing to lose); XLNet's relative segment term is
    # still ~1e-6 after three steps from its small initialisation, too small for the control
    if 1 in enc.type_ids and objective != "xlnet":
        assert (no_types - hf.logits).abs().max().item() > 1e-3


def test_export_never_overwrites_a_folder_that_is_not_an_export(exported, tmp_path, capsys):
    """A course model folder or a folder of the user's files is refused (nothing in it
    changes); a new folder, an empty one and an earlier export (replaced) are written; a path
    below a file is one line, not a traceback."""
    bert, bert_hf = exported["bert"]
    roberta = exported["roberta"][0]
    before = {p.name: p.read_bytes() for p in roberta.iterdir() if p.is_file()}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    (tmp_path / "afile").write_text("x")
    capsys.readouterr()
    for target, needle in (
        (roberta, "is not empty and holds no earlier export"),
        (tmp_path / "notes", "is not empty and holds no earlier export"),
        (tmp_path / "afile" / "sub", "afile is a file"),
    ):
        assert main(["export", str(bert), str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in roberta.iterdir() if p.is_file()} == before
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["mine.txt"]
    (tmp_path / "empty").mkdir()
    again = tmp_path / "again"
    for target in (tmp_path / "empty", again, again):  # the second `again` replaces an export
        assert main(["export", str(bert), str(target)]) == 0
        assert (target / "model.safetensors").read_bytes() == (bert_hf / "model.safetensors").read_bytes()


def test_a_right_to_left_model_says_so_in_its_export(tmp_path, capsys):
    """``course train causal --causal right-to-left`` reads reversed sequences: the export
    records it in config.json and the command says how to feed it; a left-to-right one records
    nothing (control)."""
    for direction in ("right-to-left", "left-to-right"):
        model, hf = tmp_path / direction, tmp_path / f"{direction}-hf"
        assert main(["train", "causal", *TRAIN, "--causal", direction, "--out", str(model)]) == 0
        capsys.readouterr()
        assert main(["export", str(model), str(hf)]) == 0
        said = capsys.readouterr().out
        config = transformers.AutoConfig.from_pretrained(hf)
        if direction == "right-to-left":
            assert config.course_reading_direction == "right-to-left"
            assert "reads right to left" in said and "text-generation" in said
        else:
            assert not hasattr(config, "course_reading_direction") and "right to left" not in said


def test_the_causal_export_generates_as_it_was_trained(exported):
    """A practitioner's review: the exported causal LM's tokenizer padded on the right (batched
    generation continued the padding) and ended a prompt with [SEP] (an end marker the model
    never saw before a continuation). Now a prompt reads `[CLS] text`, as the training rows
    begin, and batches pad on the left: batched greedy generation equals one prompt at a time."""
    from course_lib.recipes.common import load_pretrained

    model_dir, hf_dir = exported["causal"]
    _, course_tok = load_pretrained(model_dir)
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    assert tok.padding_side == "left"
    prompts = ["the teacher walked to the harbour before", "a sailor"]
    cls = course_tok.token_to_id("[CLS]")
    assert tok(prompts[1])["input_ids"] == [cls, *course_tok.encode(prompts[1], add_special_tokens=False).ids]
    single = [
        model.generate(**tok(p, return_tensors="pt"), max_new_tokens=5, do_sample=False)[0].tolist()
        for p in prompts
    ]
    batch = model.generate(
        **tok(prompts, return_tensors="pt", padding=True), max_new_tokens=5, do_sample=False
    )
    pad = tok.pad_token_id
    assert [[t for t in row if t != pad] for row in batch.tolist()] == [
        [t for t in s if t != pad] for s in single
    ]


def test_fine_tuned_models_export_with_their_labels(exported, tmp_path, capsys):
    """A practitioner's review: `course export` refused a `course finetune` folder, though the
    name maps already covered the task heads. Now each fine-tuned class exports: transformers'
    Auto classes give the course model's logits (≤ 1e-5), config.json's id2label holds the
    labels of labels.json, and the pipelines name them."""
    import random

    from course_lib.recipes.finetune_command import load_finetuned

    rng = random.Random(0)
    words = "cat dog bird house tree car road river lamp chair".split()
    animal = ("cat", "dog", "bird")
    rows = [rng.sample(words, 4) for _ in range(40)]
    (tmp_path / "c.tsv").write_text(
        "".join(f"{'animal' if set(ws) & set(animal) else 'thing'}\t{' '.join(ws)}\n" for ws in rows)
    )
    (tmp_path / "t.conll").write_text(
        "\n\n".join("\n".join(f"{w}\t{'ANIMAL' if w in animal else 'O'}" for w in ws) for ws in rows) + "\n"
    )
    cases = [
        ("bert", "classify", "c.tsv", transformers.AutoModelForSequenceClassification, "text-classification"),
        ("albert", "classify", "c.tsv", transformers.AutoModelForSequenceClassification, None),
        ("bert", "tag", "t.conll", transformers.AutoModelForTokenClassification, "token-classification"),
        ("xlnet", "tag", "t.conll", transformers.AutoModelForTokenClassification, None),
    ]
    for start, task, data, auto, pipe in cases:
        tuned, hf = tmp_path / f"{start}-{task}", tmp_path / f"{start}-{task}-hf"
        argv = ["finetune", str(exported[start][0]), "--task", task, "--train", str(tmp_path / data)]
        assert main([*argv, "--out", str(tuned), "--steps", "3", "--batch-size", "8"]) == 0
        capsys.readouterr()
        assert main(["export", str(tuned), str(hf)]) == 0
        assert (
            f"pipeline('{'text' if task == 'classify' else 'token'}-classification'"
            in capsys.readouterr().out
        )
        ours, _, labels = load_finetuned(tuned)
        theirs = auto.from_pretrained(hf).eval()
        assert type(theirs).__name__ == type(ours).__name__
        assert theirs.config.id2label == dict(enumerate(labels))
        enc = transformers.AutoTokenizer.from_pretrained(hf)(SENTENCES, return_tensors="pt", padding=True)
        with torch.no_grad():
            assert (ours(**enc).logits - theirs(**enc).logits).abs().max().item() <= 1e-5, (start, task)
        if pipe is not None:
            found = transformers.pipeline(pipe, model=str(hf))(SENTENCES[0])
            names = {r["label"] for r in found} if task == "classify" else {r["entity"] for r in found}
            assert names and names <= set(labels), found
