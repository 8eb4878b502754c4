"""course_lib.recipes.distill: the pre-softmax attention scores, model_states, student_config, every
method of `distill` on a tiny tagger (its stages, metrics, schedule, which weights each stage
trains), knowledge transfer through untagged sentences, caching, general distillation of a
masked LM, `course train distill` end to end, and the errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

import course_lib.recipes.distill as distill_module
from course_lib.cli import main as course_main
from course_lib.data import load_documents
from course_lib.data.documents import train_tokenizer
from course_lib.models.bert import (
    IGNORE_INDEX,
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    body_of,
)
from course_lib.nn.attention import MultiHeadAttention, attention_explicit, padding_mask
from course_lib.objectives import tagging_inputs
from course_lib.objectives.distillation import attention_loss
from course_lib.recipes.common import load_pretrained, save_pretrained
from course_lib.recipes.distill import (
    METHODS,
    distill,
    distill_pretrained,
    distill_tagger,
    model_states,
    student_config,
    tagging_rows,
)
from course_lib.recipes.finetune import finetune_tagger

# the generated corpus's POS tags
TAGS = tuple("ADJ ADP ADV AUX CCONJ DET NOUN NUM PART PRON PROPN PUNCT SCONJ VERB".split())
RUN = dict(batch_size=8, lr=3e-3, device="cpu", progress=False)


def _tagged(documents):
    return [(list(s.tokens), [TAGS.index(p) for p in s.pos]) for d in documents for s in d.sentences]


@pytest.fixture(scope="module")
def documents():
    return load_documents(n_docs=40, seed=0)


@pytest.fixture(scope="module")
def tok(documents):
    return train_tokenizer(documents, vocab_size=300)


@pytest.fixture(scope="module")
def teacher_config(tok):
    return BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tok.token_to_id("[PAD]"),
        num_labels=len(TAGS),
    )


@pytest.fixture(scope="module")
def tagging(documents):
    """(tagged training sentences, untagged transfer sentences, held-out tagged sentences)."""
    other = _tagged(load_documents(n_docs=60, seed=1))
    return _tagged(documents), [ws for ws, _ in other[:150]], other[150:230]


@pytest.fixture(scope="module")
def teacher(tok, teacher_config, tagging):
    """A 2-layer POS tagger of width 32, trained on every tagged sentence."""
    model, _ = finetune_tagger(
        teacher_config, tok, tagging[0], num_labels=len(TAGS), steps=150, **{**RUN, "batch_size": 16}
    )
    return model


@pytest.fixture(scope="module")
def rows(tok, tagging):
    """A few tagged sentences and some untagged ones (labels -100)."""
    return tagging_rows(tok, tagging[0][:10], tagging[1][:40], max_len=64)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _padded_batch(tok):
    words = [["the", "cat", "sat", "."], ["Mateo", "worked", "near", "the", "dirty", "studio", "."], ["yes"]]
    enc = tagging_inputs(tok, words, max_len=64)
    assert not bool(enc["attention_mask"].all())  # padded: the mask matters
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


# --- the attention scores ---------------------------------------------------------------------


def test_scores_are_qk_over_sqrt_d_and_their_masked_softmax_is_the_attention():
    torch.manual_seed(1)
    mha = MultiHeadAttention(12, 3).eval()
    x = torch.randn(2, 5, 12)
    q = (x @ mha.w_q.weight.T + mha.w_q.bias).view(2, 5, 3, 4).transpose(1, 2)
    k = (x @ mha.w_k.weight.T + mha.w_k.bias).view(2, 5, 3, 4).transpose(1, 2)
    by_hand = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(4)
    scores = mha.scores(x)
    assert scores.shape == (2, 3, 5, 5)
    torch.testing.assert_close(scores, by_hand, rtol=1e-5, atol=1e-6)
    # cross-attention: keys of another length and width
    cross = MultiHeadAttention(12, 3, d_kv=7)
    mem = torch.randn(2, 4, 7)
    kc = (mem @ cross.w_k.weight.T + cross.w_k.bias).view(2, 4, 3, 4).transpose(1, 2)
    qc = (x @ cross.w_q.weight.T + cross.w_q.bias).view(2, 5, 3, 4).transpose(1, 2)
    torch.testing.assert_close(cross.scores(x, mem), qc @ kc.transpose(-2, -1) / 2.0, rtol=1e-5, atol=1e-6)

    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    with torch.no_grad():
        _, weights = mha(x, mask=mask, return_weights=True)
        scores = mha.scores(x)
    want = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(weights, want, rtol=1e-5, atol=1e-6)
    assert float(weights[1, :, :, 3:].abs().max()) == 0.0  # the padded keys get nothing
    # attention_explicit computes the same weights from the same q and k
    _, explicit = attention_explicit(q, k, torch.zeros(2, 3, 5, 4), mask)
    torch.testing.assert_close(explicit, want, rtol=1e-5, atol=1e-6)


def test_model_states_gives_every_layer_and_the_scores_behind_the_attention(teacher, tok):
    batch = _padded_batch(tok)
    teacher.eval()
    with torch.no_grad():
        s = model_states(teacher, batch, hidden=True, scores=True)
        out = teacher(*batch.values(), output_attentions=True)
        body = body_of(teacher)(*batch.values())
        emb = body_of(teacher).embeddings(batch["input_ids"], batch["token_type_ids"])
        only_logits = model_states(teacher, batch)
    b, n = batch["input_ids"].shape
    torch.testing.assert_close(s.logits, out.logits)
    assert only_logits.hidden is None and only_logits.scores is None
    torch.testing.assert_close(only_logits.logits, out.logits)
    assert len(s.hidden) == teacher.config.num_hidden_layers + 1
    torch.testing.assert_close(s.hidden[0], emb)
    torch.testing.assert_close(s.hidden[-1], body.last_hidden_state)
    assert len(s.scores) == teacher.config.num_hidden_layers == len(out.attentions)
    mask = padding_mask(batch["attention_mask"])
    for scores, weights in zip(s.scores, out.attentions):
        assert scores.shape == (b, teacher.config.num_attention_heads, n, n)
        torch.testing.assert_close(torch.softmax(scores.masked_fill(~mask, float("-inf")), -1), weights)
    # a masked LM: the logits are its MLM logits
    mlm = BertForMaskedLM(teacher.config).eval()
    with torch.no_grad():
        torch.testing.assert_close(model_states(mlm, batch).logits, mlm(*batch.values()).logits)


# --- student_config ---------------------------------------------------------------------------


def test_student_config_changes_the_sizes_and_keeps_the_task(teacher_config):
    s = student_config(teacher_config, layers=1, hidden=16)
    assert type(s) is BertConfig
    assert (s.num_hidden_layers, s.hidden_size, s.num_attention_heads, s.intermediate_size) == (1, 16, 2, 64)
    assert (s.vocab_size, s.max_position_embeddings, s.num_labels, s.pad_token_id) == (
        teacher_config.vocab_size,
        teacher_config.max_position_embeddings,
        len(TAGS),
        teacher_config.pad_token_id,
    )
    s = student_config(teacher_config, hidden=16, heads=4, intermediate=40)
    assert (s.num_hidden_layers, s.hidden_size, s.num_attention_heads, s.intermediate_size) == (2, 16, 4, 40)
    assert student_config(teacher_config, intermediate=48).intermediate_size == 48
    assert student_config(teacher_config) == teacher_config
    assert teacher_config.hidden_size == 32  # the teacher's config is left alone


def test_student_config_rejects_bad_sizes(teacher_config):
    with pytest.raises(ValueError, match=r"width 15 is not divisible by its 2 heads"):
        student_config(teacher_config, hidden=15)
    with pytest.raises(ValueError, match=r"width 16 is not divisible by its 3 heads"):
        student_config(teacher_config, hidden=16, heads=3)
    for kwargs, name in [
        (dict(layers=0), "num_hidden_layers"),
        (dict(hidden=-16), "hidden_size"),
        (dict(heads=0), "num_attention_heads"),
        (dict(intermediate=0), "intermediate_size"),
        (dict(hidden=16, intermediate=0), "intermediate_size"),
    ]:
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            student_config(teacher_config, **kwargs)


# --- distill: every method --------------------------------------------------------------------

METRICS = {
    "hard": [{"hard"}],
    "teacher_labels": [{"hard"}],
    "kd": [{"soft", "hard", "alpha"}],
    "hints": [{"hint"}, {"soft", "hard", "alpha"}],
    "tinybert": [{"embeddings", "hidden", "attention"}, {"soft"}],
    "joint": [{"teacher_hard", "hard", "soft"}],
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_distill_runs_every_method_as_its_stages(method, teacher, teacher_config, rows):
    assert sorted(METRICS) == sorted(METHODS)
    config = student_config(teacher_config, layers=1, hidden=16)
    before = _state(teacher)
    steps, first = 6, 4
    d = distill(teacher, config, rows, method=method, steps=steps, first_steps=first, **RUN)
    assert type(d.student) is BertForTokenClassification and not d.student.training
    assert d.student.config == config
    n_first = first if len(METRICS[method]) == 2 else 0
    h = d.history
    assert len(h.loss) == n_first + steps and h.steps == list(range(n_first + steps))
    assert set(h.metrics) == set().union(*METRICS[method])
    for stage, n in zip(METRICS[method], [n_first, steps][-len(METRICS[method]) :]):
        for key in stage:
            assert len(h.metrics[key]) == n, (key, len(h.metrics[key]))
    assert all(math.isfinite(v) for v in h.loss)
    if method == "kd":  # the soft weight goes linearly from 0.9 to 0.1 ...
        assert h.metrics["alpha"] == pytest.approx([0.9 - 0.8 * i / (steps - 1) for i in range(steps)])
        for loss, a, soft, hard in zip(h.loss, h.metrics["alpha"], h.metrics["soft"], h.metrics["hard"]):
            assert loss == pytest.approx(a * soft + (1 - a) * hard, rel=1e-5)  # ... and weighs the parts
    if method == "joint":  # a copy of the teacher is trained alongside; the one given is left alone
        assert d.teacher is not teacher and type(d.teacher) is type(teacher) and not d.teacher.training
        assert not _same(_state(d.teacher), before)
        assert _same(_state(teacher), before)
    else:
        assert d.teacher is teacher
        assert _same(_state(teacher), before)


def test_hints_first_stage_trains_only_up_to_the_guided_layer(teacher, teacher_config, rows, monkeypatch):
    """Record what each stage's fit may train and what it changed in the Distiller: FitNets'
    stage 1 the student's embeddings, its layers up to the guided one and the regressor, nothing
    else (the classifier and the layer above stay as they were); stage 2 everything."""
    stages, real_fit = [], distill_module.fit

    def recording_fit(run, *args, **kwargs):
        start = _state(run)
        trainable = {n for n, p in run.named_parameters() if p.requires_grad}
        history = real_fit(run, *args, **kwargs)
        after = _state(run)
        stages.append((trainable, {k for k in start if not torch.equal(start[k], after[k])}))
        return history

    monkeypatch.setattr(distill_module, "fit", recording_fit)
    config = student_config(teacher_config, layers=2, hidden=16)
    d = distill(teacher, config, rows, method="hints", steps=3, first_steps=4, **RUN)  # guided: layer 1 of 2
    assert len(stages) == 2 and d.history.metrics["hint"] and len(d.history.metrics["hint"]) == 4
    names = {n for n, _ in d.student.named_parameters()}
    everything = {f"student.{n}" for n in names} | {"proj.proj.weight", "proj.proj.bias"}  # 16 -> 32
    guided = {
        n
        for n in everything
        if n.startswith(("student.bert.embeddings.", "student.bert.encoder.layers.0.", "proj."))
    }
    assert any(n.startswith("student.bert.encoder.layers.1.") for n in everything - guided)
    assert any(n.startswith("student.classifier.") for n in everything - guided)
    (trainable1, changed1), (trainable2, changed2) = stages
    assert trainable1 == guided and changed1 == guided  # every guided weight moved, nothing else
    assert trainable2 == everything
    assert {"student.classifier.weight", "student.bert.encoder.layers.1.ffn_norm.weight"} <= changed2
    assert all(p.requires_grad for p in d.student.parameters())  # the freezing is undone


def test_teacher_labels_take_the_true_tag_where_there_is_one(teacher, teacher_config, tok, tagging):
    """Pseudo-labelling: the teacher's argmax labels the untagged sentences (a loss where hard
    labels give none); a given tag wins over the teacher's (here every word a NOUN, which the
    student learns although the teacher says otherwise)."""
    config = student_config(teacher_config, layers=1, hidden=16)
    untagged = tagging_rows(tok, [], tagging[1][:16], max_len=64)
    pseudo = distill(teacher, config, untagged, method="teacher_labels", steps=3, **RUN)
    hard = distill(teacher, config, untagged, method="hard", steps=3, **RUN)
    assert min(pseudo.history.metrics["hard"]) > 0.5 and max(hard.history.metrics["hard"]) == 0.0
    noun = TAGS.index("NOUN")
    all_nouns = [(ws, [noun] * len(ws)) for ws, _ in tagging[0][:16]]
    r = tagging_rows(tok, all_nouns, max_len=64)
    d = distill(teacher, config, r, method="teacher_labels", steps=10, **{**RUN, "lr": 1e-2})
    args = (r["input_ids"], r["attention_mask"], r["token_type_ids"])
    with torch.no_grad():
        said = teacher.eval()(*args).logits.argmax(-1)[r["positions"]]
        learnt = d.student(*args).logits.argmax(-1)[r["positions"]]
    assert float((said == noun).float().mean()) < 0.5
    assert float((learnt == noun).float().mean()) > 0.9


def _attention_gaps(student, teacher, rows):
    """TinyBERT's attention loss of the (1-layer) student against each teacher layer, on every row."""
    batch = {k: rows[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        s = model_states(student.eval(), batch, scores=True)
        t = model_states(teacher.eval(), batch, scores=True)
    return [float(attention_loss(s.scores[0], t_m, batch["attention_mask"])) for t_m in t.scores]


def test_tinybert_intermediate_stage_imitates_the_mapped_teacher_layer(teacher, teacher_config, rows):
    config = student_config(teacher_config, layers=1, hidden=16)
    opts = dict(steps=0, first_steps=30, **{**RUN, "lr": 1e-2})
    d = distill(teacher, config, rows, method="tinybert", **opts)  # the uniform map: layer 1 <- 2
    assert set(d.history.metrics) == {"embeddings", "hidden", "attention"} and len(d.history.loss) == 30
    mapped_to_1 = distill(teacher, config, rows, method="tinybert", layer_map=[1], **opts)
    start = distill(teacher, config, rows, method="tinybert", steps=0, first_steps=1, **{**RUN, "lr": 1e-12})
    before, to_2, to_1 = (_attention_gaps(r.student, teacher, rows) for r in (start, d, mapped_to_1))
    assert to_2[1] < 0.5 * before[1] and to_2[1] < to_2[0]
    assert to_1[0] < 0.5 * before[0] and to_1[0] < to_1[1]


# --- knowledge transfer -----------------------------------------------------------------------


def _agreement(student, teacher, tok, sentences):
    enc = tagging_inputs(tok, sentences, max_len=64)
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    with torch.no_grad():
        same = student.eval()(*args).logits.argmax(-1) == teacher.eval()(*args).logits.argmax(-1)
    return float(same[enc["word_index"] >= 0].float().mean())


def test_kd_on_untagged_sentences_transfers_the_teacher(teacher, teacher_config, tok, tagging):
    """Ten tagged sentences: alone (hard labels), a student agrees with the teacher on about half the
    held-out words; with 150 untagged ones labelled softly by the teacher, on far more."""
    train, transfer, held = tagging
    config = student_config(teacher_config, layers=1, hidden=16)
    few = train[:10]
    opts = dict(steps=60, **{**RUN, "batch_size": 16})
    hard = distill_tagger(teacher, config, tok, few, method="hard", **opts)
    kd = distill_tagger(teacher, config, tok, few, transfer, method="kd", eval_items=held, **opts)
    words = [ws for ws, _ in held]
    a_hard, a_kd = _agreement(hard.student, teacher, tok, words), _agreement(kd.student, teacher, tok, words)
    assert a_kd > a_hard + 0.1, (a_kd, a_hard)
    assert set(kd.history.evals) == {"accuracy", "unseen_accuracy"} and hard.history.evals == {}


# --- errors -----------------------------------------------------------------------------------


def test_distill_errors_say_what_is_wrong(teacher, teacher_config, tok, rows, tagging):
    config = student_config(teacher_config, layers=1, hidden=16)
    with pytest.raises(ValueError, match=r"method must be one of .*'tinybert'.*got 'fitnets'"):
        distill(teacher, config, rows, method="fitnets", steps=1, **RUN)
    four_heads = student_config(teacher_config, layers=1, hidden=16, heads=4)
    with pytest.raises(ValueError, match=r"head by head: the student has 4 heads, the teacher 2"):
        distill(teacher, four_heads, rows, method="tinybert", steps=1, first_steps=1, **RUN)
    with pytest.raises(
        ValueError, match=r"layer_map needs one teacher layer in \[1, 2\] per student layer \(1\)"
    ):
        distill(teacher, config, rows, method="tinybert", steps=1, first_steps=1, layer_map=[1, 2], **RUN)
    with pytest.raises(ValueError, match=r"layer_map needs .* got \[3\]"):
        distill(teacher, config, rows, method="tinybert", steps=1, first_steps=1, layer_map=[3], **RUN)
    with pytest.raises(ValueError, match="guided_layer must lie in"):
        distill(teacher, config, rows, method="hints", steps=1, first_steps=1, guided_layer=2, **RUN)
    with pytest.raises(ValueError, match="nothing to train"):
        distill(teacher, config, rows, method="tinybert", steps=0, first_steps=0, **RUN)
    with pytest.raises(ValueError, match="non-empty lists of words"):
        tagging_rows(tok, tagging[0][:2], [["a", "cat"], []])
    with pytest.raises(ValueError, match="non-empty lists of words"):
        tagging_rows(tok, [], ["a cat"])
    with pytest.raises(ValueError, match="at least one word"):
        tagging_rows(tok, [([], [])])
    with pytest.raises(ValueError, match="no sentences"):
        tagging_rows(tok, [])
    classifier = BertForSequenceClassification(teacher_config)
    with pytest.raises(
        TypeError, match="distils a BertForTokenClassification, got BertForSequenceClassification"
    ):
        distill_tagger(classifier, config, tok, tagging[0][:2], steps=1, **RUN)
    with pytest.raises(ValueError, match="num_labels"):
        distill_tagger(teacher, config, tok, [(["a", "cat"], [0, len(TAGS)])], steps=1, **RUN)


def test_tagging_rows_mark_the_first_piece_of_every_word(tok, tagging):
    tagged, untagged = tagging[0][:2], tagging[1][:2]
    r = tagging_rows(tok, tagged, untagged, max_len=64)
    assert r["input_ids"].size(0) == 4 and "word_index" not in r
    n_words = [len(ws) for ws, _ in tagged] + [len(ws) for ws in untagged]
    assert r["positions"].sum(1).tolist() == n_words
    labelled = r["labels"] != IGNORE_INDEX
    assert torch.equal(labelled[:2], r["positions"][:2]) and not bool(labelled[2:].any())
    assert r["labels"][0][r["positions"][0]].tolist() == tagged[0][1]


# --- caching ----------------------------------------------------------------------------------


def test_a_cached_run_loads_and_a_changed_one_retrains(teacher, teacher_config, rows, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path))
    monkeypatch.delenv("COURSE_RETRAIN", raising=False)
    config = student_config(teacher_config, layers=1, hidden=16)
    opts = dict(steps=3, cache_name="distill-test", **RUN)
    first = distill(teacher, config, rows, method="kd", **opts)
    second = distill(teacher, config, rows, method="kd", **opts)
    assert first.history.loaded is False and second.history.loaded is True
    assert second.history.loss == first.history.loss
    assert _same(_state(first.student), _state(second.student))
    assert distill(teacher, config, rows, method="teacher_labels", **opts).history.loaded is False
    hotter = distill(teacher, config, rows, method="kd", temperature=4.0, **opts)
    assert hotter.history.loaded is False and hotter.history.loss != first.history.loss
    assert distill(teacher, config, rows, method="kd", temperature=4.0, **opts).history.loaded is True


# --- general distillation of a masked LM ------------------------------------------------------


@pytest.fixture(scope="module")
def mlm_teacher(teacher_config):
    torch.manual_seed(0)
    return BertForMaskedLM(teacher_config).eval()


@pytest.mark.parametrize("method", ["kd", "tinybert"])
def test_distill_pretrained_logs_heldout_mlm_accuracy(method, mlm_teacher, documents, tok, monkeypatch):
    seen, real_fit = [], distill_module.fit

    def recording_fit(run, batches, loss_fn, **kwargs):
        def loss(m, batch):
            seen.append((kwargs["desc"], "labels" in batch))
            return loss_fn(m, batch)

        return real_fit(run, batches, loss, **kwargs)

    monkeypatch.setattr(distill_module, "fit", recording_fit)
    config = student_config(mlm_teacher.config, layers=1, hidden=16)
    first = 3 if method == "tinybert" else 0
    d = distill_pretrained(
        mlm_teacher,
        documents,
        tok,
        config,
        method=method,
        steps=4,
        first_steps=first,
        heldout=0.1,
        eval_every=2,
        **RUN,
    )
    assert type(d.student) is BertForMaskedLM and d.student.config.num_hidden_layers == 1
    assert d.history.eval_steps == [first + 1, first + 3]
    assert len(d.history.evals["mlm_accuracy"]) == 2
    assert all(0.0 <= a <= 1.0 for a in d.history.evals["mlm_accuracy"])
    assert set(d.history.evals) == {"mlm_accuracy", "mlm_loss"}
    # TinyBERT's first stage reads unmasked text (no labels), the later stage masked text
    last = "tinybert: prediction" if method == "tinybert" else "kd"
    assert seen == [("tinybert: intermediate", False)] * first + [(last, True)] * 4
    if method == "tinybert":
        assert len(d.history.metrics["attention"]) == 3 and len(d.history.metrics["soft"]) == 4


# --- the command line -------------------------------------------------------------------------


@pytest.fixture
def text_and_teacher(tmp_path, mlm_teacher, tok):
    text = tmp_path / "text"
    text.mkdir()
    for i, seed in enumerate((2, 3)):  # 40 documents: every 20th is held out
        docs = load_documents(n_docs=20, seed=seed)
        (text / f"part{i}.txt").write_text("\n\n".join(d.text for d in docs) + "\n")
    save_pretrained(tmp_path / "teacher", mlm_teacher, tok)
    return text, tmp_path / "teacher"


def test_cli_distils_a_saved_teacher_into_a_loadable_student(text_and_teacher, tok, tmp_path, capsys):
    text, teacher_dir = text_and_teacher
    out = tmp_path / "student"
    argv = [
        "train",
        "distill",
        "--teacher",
        str(teacher_dir),
        "--text",
        str(text),
        "--out",
        str(out),
        "--steps",
        "3",
    ]
    argv += ["--batch-size", "4", "--layers", "1", "--hidden", "16", "--device", "cpu"]
    assert course_main([*argv, "--method", "tinybert", "--first-steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "(tinybert) for 5 steps" in printed and str(out) in printed and "held-out: mlm_accuracy" in printed
    student, tok2 = load_pretrained(out)
    assert type(student) is BertForMaskedLM and not student.training
    assert (student.config.num_hidden_layers, student.config.hidden_size) == (1, 16)
    assert student.config.num_attention_heads == 2 and student.config.vocab_size == tok.get_vocab_size()
    assert tok2.to_str() == tok.to_str()
    meta = json.loads((out / "model.json").read_text())
    assert meta["recipe"]["method"] == "tinybert" and len(meta["history"]["loss"]) == 5
    # the module entry point is the same command
    assert distill_module.main(argv[2:]) == 0
    assert "(kd) for 3 steps" in capsys.readouterr().out


def test_cli_names_a_missing_teacher_file(text_and_teacher, tmp_path, capsys):
    text, _ = text_and_teacher
    out = tmp_path / "student"
    argv = [
        "train",
        "distill",
        "--teacher",
        str(tmp_path / "nothing"),
        "--text",
        str(text),
        "--out",
        str(out),
    ]
    assert course_main([*argv, "--steps", "1", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "course train distill:" in err and str(tmp_path / "nothing" / "config.json") in err
    assert "Traceback" not in err and not out.exists()
