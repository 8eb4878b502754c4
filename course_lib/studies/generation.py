"""Study ``05_generation``: can chapter 5's masked LM generate? Judges that favour neither model.

Study ``05_ar_ae`` judges generated text by the left-to-right LM's likelihood and the masked
LM's pseudo-log-likelihood: each judge favours text like its own, its AR samples are drawn at
temperature 1 while the masked LM may fill its most confident position first, and it uses 40
prompts. This study retrains the three generators of chapter 5 with the same settings and
seeds (``ar``, ``ae`` of 800 steps, ``ae_long`` of 6,400; :func:`~course_lib.studies.ar_ae.
pretrain_chapter_models`) and judges their continuations of ``prompts`` held-out two-word
prompts at each of ``temperatures`` (every generator at the same temperature, drawing from the
same random stream at each), by:

* **grammar**: the share of prompt + continuation texts that the generator's own grammar can
  produce (the whole text, and its first sentence: up to the first full stop), read by
  :class:`~course_lib.analysis.judges.GrammarJudge` (every run of ``n`` word classes occurs in
  a large sample of the corpus generator's documents; a last word cut by the token budget is
  dropped); it knows neither model. The models were trained one sentence per row: after a full
  stop the AR model would write ``[SEP]``, which generation forbids, so what follows its first
  sentence is text it never saw; the masked LM's frame tells it where the text ends;
* **diversity**: distinct bigrams and trigrams over all continuations of a generator
  (:func:`~course_lib.analysis.judges.distinct_n`), and the simple statistics of chapter 5
  (repeats, full stops);
* **the models' own judges**: the left-to-right LM's log-likelihood and the 6,400-step masked
  LM's PLL per token (:func:`~course_lib.studies.ar_ae.model_judges`).

Every judge also reads two controls built from the same prompts: ``reference``, the held-out
text that really follows each prompt (the same number of tokens: the ceiling, and the grammar
judge's false-negative rate), and ``shuffled``, those tokens in a random order (the floor: a
judge that cannot tell it from the reference sees nothing). No wall-clock times are stored.
"""

from __future__ import annotations

from typing import Any

import torch

from ..analysis.cloze import generation_statistics
from ..analysis.judges import GrammarJudge, distinct_n, text_words
from ..data.corpus import generate_documents
from ..data.tasks import name_sentences
from . import Study, register_study
from .ar_ae import QUICK as AR_AE_QUICK
from .ar_ae import SETTINGS as AR_AE
from .ar_ae import generate_continuations, model_judges, pretrain_chapter_models

GENERATOR_ARMS = ("ar", "ae", "ae_long")
SETTINGS: dict[str, Any] = dict(
    {k: AR_AE[k] for k in ("documents", "names", "tokenizer", "model", "pretrain", "curve_points")},
    arms={k: AR_AE["arms"][k] for k in GENERATOR_ARMS},
    # the judge's sample of the corpus generator: seeds that no training or held-out text uses
    grammar=dict(n=3, docs=60000, docs_seed=9001, names=4000, names_seed=9002),
    generation=dict(
        prompts=200, prompt_words=2, tokens=10, temperatures=(1.0, 0.7, 0.4), shown=4, min_words=5
    ),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    **{k: AR_AE_QUICK[k] for k in ("documents", "names", "tokenizer", "model", "pretrain", "curve_points")},
    arms={k: AR_AE_QUICK["arms"][k] for k in GENERATOR_ARMS},
    grammar=dict(SETTINGS["grammar"], docs=300, names=50),
    generation=dict(SETTINGS["generation"], prompts=6, tokens=8, temperatures=(1.0, 0.4), shown=2),
)


def prompts_and_references(tokenizer, held_docs, g: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompts, references)``: ``[CLS]`` and the first ``prompt_words`` words of held-out
    sentences of at least ``min_words`` words (each prompt once, in the documents' order), and
    the same followed by the ``tokens`` tokens that follow in the held-out document (prompts
    without that many are skipped), up to ``prompts`` of them."""
    k = 1 + g["prompt_words"]
    prompts: list[list[int]] = []
    references: list[list[int]] = []
    for doc in held_docs:
        for i, sentence in enumerate(doc.sentences):
            if len(sentence) < g["min_words"]:
                continue
            prompt = tokenizer.encode(" ".join(sentence.text.split()[: g["prompt_words"]])).ids[:-1]
            rest = tokenizer.encode(" ".join(x.text for x in doc.sentences[i:])).ids[:-1]
            if len(prompt) != k or rest[:k] != prompt or len(rest) < k + g["tokens"] or prompt in prompts:
                continue
            prompts.append(prompt)
            references.append(rest[: k + g["tokens"]])
            if len(prompts) == g["prompts"]:
                return torch.tensor(prompts), torch.tensor(references)
    if not prompts:
        raise ValueError("no held-out sentence gives a prompt with a reference continuation")
    return torch.tensor(prompts), torch.tensor(references)


def grammar_judge(tokenizer, s: dict[str, Any]) -> GrammarJudge:
    """The :class:`GrammarJudge` of the settings' grammar sample, reading words as they come back
    from ``tokenizer`` (a round trip through its WordPiece pieces)."""
    j = s["grammar"]
    docs = [d.sentences for d in generate_documents(j["docs"], seed=j["docs_seed"])]
    docs += [[x] for x in name_sentences(j["names"], seed=j["names_seed"])]
    cache: dict[str, list[str]] = {}

    def normalise(word: str) -> list[str]:
        if word not in cache:
            cache[word] = text_words(tokenizer.decode(tokenizer.encode(word, add_special_tokens=False).ids))
        return cache[word]

    return GrammarJudge.from_sentences(docs, normalise, n=j["n"])


def judged_words(judge: GrammarJudge, tokenizer, ids: torch.Tensor) -> list[list[str]]:
    """The words of each row of ``ids`` after ``[CLS]``; a last word the judge does not know is
    dropped (the token budget may cut a word in two), for every generator and control alike."""
    out = []
    for row in ids.tolist():
        w = text_words(tokenizer.decode(row[1:]))
        if w and not judge.known(w[-1]):
            w = w[:-1]
        out.append(w)
    return out


def judge_texts(
    judge: GrammarJudge, tokenizer, models: dict, ids: torch.Tensor, k: int, sp: dict[str, int], shown: int
) -> dict[str, Any]:
    """Every judge of the texts ``ids`` (``[CLS]``, a prompt of ``k - 1`` tokens, a continuation)."""
    words = judged_words(judge, tokenizer, ids)
    prompt_words = len(text_words(tokenizer.decode(ids[0, 1:k].tolist())))
    continuations = [w[prompt_words:] for w in words]
    texts = [tokenizer.decode(r[k:].tolist()) for r in ids]
    # the first sentence: the words up to the first full stop after the prompt (or all of them).
    # Chapter 5's models were trained one sentence per row, so after a full stop the AR model would
    # write [SEP], which generation forbids; what it writes next it has never seen.
    first = [w[: next((i + 1 for i in range(prompt_words, len(w)) if w[i] == "."), len(w))] for w in words]
    return {
        "grammatical_share": judge.grammatical_share(words),
        "first_sentence_grammatical_share": judge.grammatical_share(first),
        "first_sentence_ends_share": sum(
            len(f) < len(w) or (f and f[-1] == ".") for f, w in zip(first, words)
        )
        / len(words),
        "first_sentence_words": sum(len(f) - prompt_words for f in first) / len(first),
        "distinct_2": distinct_n(continuations, 2),
        "distinct_3": distinct_n(continuations, 3),
        **generation_statistics(texts),
        **model_judges(models, ids, sp),
        "examples": texts[:shown],
    }


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    models, arms, (_, held_docs, _), tokenizer, sp = pretrain_chapter_models(s, seed)
    out: dict[str, Any] = dict(arms)
    judge = grammar_judge(tokenizer, s)
    g = s["generation"]
    prompts, references = prompts_and_references(tokenizer, held_docs, g)
    k = prompts.size(1)
    out["generation"] = {
        "n": len(prompts),
        "prompts": [tokenizer.decode(q[1:]) for q in prompts[: g["shown"]].tolist()],
        "judge_ngrams": len(judge.ngrams),
        "judge_words": len(judge.lexicon),
    }
    # the controls: the true continuation, and its tokens in a random order
    order = torch.stack(
        [
            torch.randperm(g["tokens"], generator=torch.Generator().manual_seed(seed * 7919 + i))
            for i in range(len(prompts))
        ]
    )
    shuffled = torch.cat([references[:, :k], references[:, k:].gather(1, order)], 1)
    for name, ids in (("reference", references), ("shuffled", shuffled)):
        out[f"control_{name}"] = judge_texts(judge, tokenizer, models, ids, k, sp, g["shown"])
    for temperature in g["temperatures"]:
        generated = generate_continuations(models, prompts, g["tokens"], temperature, seed, sp)
        for name, ids in generated.items():
            out[f"t{temperature:g}_{name}"] = judge_texts(judge, tokenizer, models, ids, k, sp, g["shown"])
    return out


STUDY = register_study(
    Study(
        name="05_generation",
        description="can a masked LM generate? chapter 5's three generators at matched temperatures, "
        "judged by the corpus grammar, diversity and both models, against the held-out text and its shuffle",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(GrammarJudge, text_words, distinct_n),
    )
)
