r"""A corpus of English generated in code, every sentence with its gold dependency tree.

The course trains its models on sentences drawn from a probabilistic grammar over a real
English lexicon (:mod:`course_lib.data.lexicon`): about 2,300 lemmas in 12 topics, verbs
with argument frames that select what their subjects and objects can be (people and
animals eat, food is eaten), adjectives that fit the nouns they modify. The grammar covers
determiners, adjectives, prepositional phrases, subject and object relative clauses,
passives, copulas, existentials, that-clauses, adverbial clauses and coordination, in
several tenses with negation.

Every sentence comes with

* ``tokens`` (Penn Treebank style, ``didn't`` = ``did`` + ``n't``) and ``text``;
* ``pos``: Universal POS tags; ``deprels``: Universal Dependencies relations;
* ``heads``: **0-based** head index of each token, **-1 for the root**. So the tree has the
  edges :math:`(i, \mathrm{heads}_i)` for every :math:`i` with :math:`\mathrm{heads}_i \ge 0`;
* annotations of the phenomena the chapters study:

  - ``agreement``: ``(subject, verb, attractor)`` triples, the verb being the token whose
    form shows number (*eats*/*eat*, *is*/*are*, *has*/*have*); ``attractor`` is the last
    noun between subject and verb, or -1 (*The keys to the cabinet* **are** ...);
  - ``senses``: ``(index, sense)`` for words with several meanings (*a traffic jam* vs
    *apple jam*, *the bank of the river* vs *the bank in the city*);
  - ``coref``: ``(pronoun, antecedent)`` pairs, e.g. in Winograd-style sentences
    (*The animal didn't cross the street because it was too tired / too wide*);
  - ``names``: ``(start, end)`` spans of multi-token names (*New York*, *Harry Potter*);
  - ``phenomena``: sorted labels (``"agreement"``, ``"attractor"``, ``"relative_clause"``,
    ``"passive"``, ``"name"``, ``"pronoun"``, ``"sense"``, ``"jam"``, ...).

Documents (:func:`generate_documents`) keep to one topic and follow one protagonist, who is
introduced by name and later referred to by pronoun, with discourse markers (*Then*,
*Later*) between sentences: a random sentence from another document is off-topic (next
sentence prediction) and swapped sentences break the order (sentence order prediction).

The same seed gives the same corpus in any process (only ``random.Random(seed)`` and lists,
never the iteration order of a set). Run ``python -m course_lib.data --benchmark``
to measure the generation speed.

Tree utilities for probing (Hewitt and Manning's structural probe): :func:`tree_depths`
(:math:`\|B h_i\|^2 \approx \mathrm{depth}(i)`), :func:`tree_distances`
(:math:`\|B(h_i - h_j)\|^2 \approx d_T(i, j)`, the number of edges on the path between
words :math:`i` and :math:`j`), :func:`validate_tree`, :func:`is_projective`.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field

import numpy as np

from .lexicon import CLASS_TAGS, TOPICS, Frame, Lexicon, Noun, Verb, load_lexicon
from .words import detokenize

__all__ = [
    "UPOS_TAGS",
    "DEPRELS",
    "PHENOMENA",
    "Sentence",
    "Document",
    "CorpusConfig",
    "generate_corpus",
    "generate_documents",
    "corpus_stats",
    "validate_tree",
    "is_valid_tree",
    "is_projective",
    "tree_depths",
    "tree_distances",
    "to_conllu",
]

#: Universal POS tags used by the corpus (index = tag id for a POS probe).
UPOS_TAGS: tuple[str, ...] = (
    "ADJ",
    "ADP",
    "ADV",
    "AUX",
    "CCONJ",
    "DET",
    "INTJ",
    "NOUN",
    "NUM",
    "PART",
    "PRON",
    "PROPN",
    "PUNCT",
    "SCONJ",
    "SYM",
    "VERB",
    "X",
)

#: Dependency relations the grammar produces (Universal Dependencies v2 names).
DEPRELS: tuple[str, ...] = (
    "root",
    "nsubj",
    "nsubj:pass",
    "obj",
    "obl",
    "obl:agent",
    "obl:tmod",
    "nmod",
    "nmod:poss",
    "amod",
    "nummod",
    "det",
    "case",
    "compound",
    "flat",
    "aux",
    "aux:pass",
    "cop",
    "mark",
    "advmod",
    "advcl",
    "ccomp",
    "xcomp",
    "acl:relcl",
    "conj",
    "cc",
    "expl",
    "punct",
)

#: Phenomenon labels a sentence can carry.
PHENOMENA: tuple[str, ...] = (
    "agreement",
    "attractor",
    "relative_clause",
    "pp_modifier",
    "coordination",
    "subordinate",
    "complement",
    "passive",
    "copula",
    "existential",
    "negation",
    "name",
    "pronoun",
    "sense",
    "jam",
)


# --------------------------------------------------------------------------- data classes


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence. Trees use 0-based heads with -1 for the root.

    Sentences read from a user's text have ``pos``, ``heads`` and ``deprels`` set to None
    (no gold annotation); :attr:`has_tree` tells which kind a sentence is.
    """

    tokens: tuple[str, ...]
    pos: tuple[str, ...] | None = None
    heads: tuple[int, ...] | None = None
    deprels: tuple[str, ...] | None = None
    topic: str | None = None
    phenomena: tuple[str, ...] = ()
    agreement: tuple[tuple[int, int, int], ...] = ()  # (subject, agreeing verb, attractor or -1)
    senses: tuple[tuple[int, str], ...] = ()  # (token index, sense label), e.g. (4, "traffic")
    coref: tuple[tuple[int, int], ...] = ()  # (pronoun index, antecedent head index)
    names: tuple[tuple[int, int], ...] = ()  # [start, end) spans of multi-token names
    written: str | None = None  # a user's sentence as it was written (spaces normalised)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def text(self) -> str:
        """The sentence as ordinary text (``word_tokenize(text) == tokens``): as the user wrote
        it for a sentence read from a file (quotes, emoji sequences and spacing kept), else
        the tokens joined (:func:`~course_lib.data.words.detokenize`)."""
        return self.written if self.written is not None else detokenize(self.tokens)

    @property
    def has_tree(self) -> bool:
        return self.heads is not None

    @property
    def punct_mask(self) -> tuple[bool, ...]:
        """True for punctuation tokens (excluded from UUAS and the probes' evaluation)."""
        if self.pos is None:
            return tuple(not any(c.isalnum() for c in t) for t in self.tokens)
        return tuple(p == "PUNCT" for p in self.pos)


@dataclass(frozen=True, slots=True)
class Document:
    """Consecutive sentences on one topic (``topic`` is None for a user's text)."""

    sentences: tuple[Sentence, ...]
    topic: str | None = None

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.sentences)


@dataclass
class CorpusConfig:
    """Probabilities of the grammar. The defaults give every phenomenon a few percent."""

    # sentence kinds (relative weights) of generate_corpus; documents use their own mix
    w_clause: float = 0.40  # plain clause: subject, verb, object / PP, adjuncts
    w_coordination: float = 0.07  # clause, and/but clause
    w_subordinate: float = 0.08  # clause because/when/after ... clause (either order)
    w_complement: float = 0.06  # someone says/thinks that clause
    w_passive: float = 0.05  # the cake was eaten by the dog
    w_copula: float = 0.06  # the soup is hot / the cat is in the garden
    w_existential: float = 0.04  # there are two cats in the garden
    w_agreement: float = 0.08  # a subject with a PP or relative clause of the other number
    w_name: float = 0.06  # New York is a big city in the United States / Harry Potter ...
    w_pronoun: float = 0.04  # the animal didn't cross the street because it was too tired
    w_jam: float = 0.03  # a traffic jam / apple jam
    w_sense: float = 0.03  # other ambiguous nouns in a context that separates their senses
    # inside noun phrases and clauses
    p_topic: float = 0.8  # a noun comes from the sentence's topic (else from any topic)
    p_plural: float = 0.35  # a countable noun is plural
    p_adjective: float = 0.35  # a noun gets an adjective (a second one with half that)
    p_pp_modifier: float = 0.10  # a noun gets a PP (the dog with the ball)
    p_relative: float = 0.06  # a noun gets a relative clause (the dog that chased the cat)
    p_name: float = 0.12  # a person is a name (Anna, Harry Potter) rather than a noun
    p_pronoun: float = 0.08  # a person is a pronoun (she, they)
    p_negation: float = 0.08
    p_location: float = 0.22  # a clause gets a place (in the kitchen, in New York)
    p_city: float = 0.15  # ... and that place is a city
    p_time: float = 0.12  # a clause gets a time (yesterday, in the morning)
    p_adverb: float = 0.08  # a clause gets a manner adverb (slowly)
    max_depth: int = 2  # how deep clauses may embed


# --------------------------------------------------------------------------- tree utilities


def validate_tree(heads, *, n_tokens: int | None = None) -> None:
    """Raise ValueError unless ``heads`` (0-based, -1 = root) is a tree over its tokens.

    A tree has exactly one root, every head in ``range(n)``, no self-loops and no cycles
    (every token reaches the root).
    """
    heads = list(heads)
    n = len(heads)
    if n == 0:
        raise ValueError("empty sentence: a tree needs at least one token")
    if n_tokens is not None and n != n_tokens:
        raise ValueError(f"{n} heads for {n_tokens} tokens")
    roots = [i for i, h in enumerate(heads) if h == -1]
    if len(roots) != 1:
        raise ValueError(f"a tree has exactly one root (head -1), found {len(roots)}: {roots}")
    for i, h in enumerate(heads):
        if h != -1 and not 0 <= h < n:
            raise ValueError(f"head {h} of token {i} is outside 0..{n - 1}")
        if h == i:
            raise ValueError(f"token {i} is its own head")
    state = [0] * n  # 0 unvisited, 1 on the current path, 2 reaches the root
    for start in range(n):
        path = []
        i = start
        while i != -1 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = heads[i]
        if i != -1 and state[i] == 1:
            raise ValueError(f"cycle through token {i}")
        for j in path:
            state[j] = 2


def is_valid_tree(heads) -> bool:
    try:
        validate_tree(heads)
    except ValueError:
        return False
    return True


def is_projective(heads) -> bool:
    """True if no two arcs cross (drawn above the sentence)."""
    arcs = [(min(i, h), max(i, h)) for i, h in enumerate(heads) if h >= 0]
    for a, b in arcs:
        for c, d in arcs:
            if a < c < b < d:
                return False
    return True


def _ancestor_matrix(heads) -> np.ndarray:
    """A[i, k] = 1 if k is i or an ancestor of i."""
    heads = np.asarray(heads, dtype=np.int64)
    validate_tree(heads.tolist())
    n = len(heads)
    anc = np.eye(n, dtype=np.int64)
    cur = np.arange(n)
    parent = np.where(heads < 0, np.arange(n), heads)  # the root points to itself
    for _ in range(n):
        cur = parent[cur]
        anc[np.arange(n), cur] = 1
    return anc


def tree_depths(heads) -> np.ndarray:
    """Number of edges from each token to the root (root = 0), shape ``[n]``."""
    return _ancestor_matrix(heads).sum(1) - 1


def tree_distances(heads) -> np.ndarray:
    """Path lengths in the (undirected) tree between all pairs of tokens, shape ``[n, n]``.

    :math:`d(i, j) = \\mathrm{depth}(i) + \\mathrm{depth}(j) - 2\\,\\mathrm{depth}(\\mathrm{lca}(i, j))`,
    where the lowest common ancestor's depth is the number of shared ancestors minus one.
    """
    anc = _ancestor_matrix(heads)
    depth = anc.sum(1) - 1
    lca_depth = anc @ anc.T - 1
    return depth[:, None] + depth[None, :] - 2 * lca_depth


def to_conllu(sentences) -> str:
    """CoNLL-U text (1-based ids, head 0 = root), e.g. for the original structural-probe code."""
    blocks = []
    for k, s in enumerate(sentences):
        if not s.has_tree:
            raise ValueError(f"sentence {k} has no gold tree (read from user text?)")
        lines = [f"# sent_id = {k}", f"# text = {s.text}"]
        for i, tok in enumerate(s.tokens):
            lines.append(f"{i + 1}\t{tok}\t_\t{s.pos[i]}\t_\t_\t{s.heads[i] + 1}\t{s.deprels[i]}\t_\t_")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# --------------------------------------------------------------------------- the grammar

_PENDING = -2  # head not assigned yet

_BE = {
    ("present", "1sg"): "am",
    ("present", "3sg"): "is",
    ("present", "pl"): "are",
    ("past", "1sg"): "was",
    ("past", "3sg"): "was",
    ("past", "pl"): "were",
}
_AN_EXCEPTIONS_A = frozenset(
    {"user", "useful", "useless", "uniform", "unit", "union", "usual", "european", "one"}
)
_AN_EXCEPTIONS_AN = frozenset({"hour", "honest", "heir"})

_SUBJ_PRON = {"1sg": ("I",), "3sg": ("he", "she"), "pl": ("we", "they", "you")}
_OBJ_PRON = {"he": "him", "she": "her", "I": "me", "we": "us", "they": "them", "you": "you", "it": "it"}
_POSS = ("my", "his", "her", "our", "their", "your")
_MANNER = ("quickly", "slowly", "carefully", "quietly", "happily", "loudly", "again", "together", "suddenly")
_FREQ = ("often", "always", "never", "usually", "sometimes", "rarely")
_MARKERS = ("Then", "Later", "Afterwards", "Soon", "Suddenly", "Finally", "Next", "Meanwhile")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_SUBORD = ("because", "when", "after", "before", "while", "although", "if")
_NUMERALS = ("two", "three", "four", "five", "six", "ten")
_STATIVE = frozenset(
    {
        "know",
        "believe",
        "like",
        "love",
        "hate",
        "want",
        "need",
        "hope",
        "understand",
        "remember",
        "forget",
        "see",
        "hear",
        "notice",
        "own",
        "think",
        "feel",
        "smell",
        "taste",
    }
)
_MODALS = ("can", "will", "should", "must", "could", "would", "might")
_LOC_PREPS = ("in", "in", "in", "near", "at", "behind", "outside")

# PP modifiers of a noun by its class: (preposition, tags of the noun inside the PP)
_PP_MOD: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "person": (
        ("with", ("ownable", "animal")),
        ("from", ("place",)),
        ("near", ("place", "object")),
        ("of", ("person",)),
    ),
    "animal": (
        ("with", ("object",)),
        ("near", ("place", "object", "plant")),
        ("from", ("place",)),
        ("behind", ("physical",)),
    ),
    "food": (("on", ("object",)), ("in", ("object", "place")), ("from", ("place",)), ("near", ("object",))),
    "drink": (("in", ("object",)), ("from", ("place",))),
    "vehicle": (("near", ("place", "vehicle")), ("behind", ("vehicle", "place")), ("with", ("object",))),
    "place": (("near", ("place",)), ("behind", ("place",)), ("in", ("place",))),
    "object": (
        ("on", ("object",)),
        ("under", ("object", "plant")),
        ("near", ("physical",)),
        ("in", ("place", "object")),
    ),
    "text": (("about", ("animal", "person", "place", "food", "event")), ("on", ("object",))),
    "instrument": (("in", ("place",)), ("near", ("object",))),
    "music": (("about", ("animal", "person", "place", "weather")),),
    "event": (("in", ("place",)), ("with", ("person",))),
    "plant": (("in", ("place",)), ("near", ("place",))),
    "abstract": (("about", ("person", "animal", "place", "food", "vehicle")),),
    "group": (("from", ("place",)), ("with", ("person",))),
    "body": (),
    "weather": (),
    "game": (),
}

# Winograd-style schemas: subjects, verb, preposition, objects, adjectives that make "it"
# the subject, adjectives that make "it" the object.
_WINOGRAD = (
    (
        (
            "animal",
            "dog",
            "cat",
            "horse",
            "cow",
            "sheep",
            "goat",
            "deer",
            "fox",
            "rabbit",
            "donkey",
            "camel",
            "turtle",
        ),
        "cross",
        None,
        ("street", "road", "river", "bridge", "highway", "avenue"),
        ("tired", "scared", "old", "weak", "slow", "nervous", "lazy"),
        ("wide", "busy", "dangerous", "crowded", "long", "noisy"),
    ),
    (
        ("animal", "dog", "cat", "horse", "goat", "deer", "fox", "rabbit", "donkey", "pig", "sheep"),
        "jump",
        "over",
        ("fence", "wall", "gate", "log", "rock"),
        ("tired", "old", "heavy", "small", "lazy", "weak"),
        ("high", "tall", "wide", "big"),
    ),
    (
        ("animal", "dog", "cat", "horse", "pig", "goat", "rabbit", "bear", "monkey", "cow"),
        "eat",
        None,
        ("food", "soup", "meat", "bread", "cake", "cheese", "fish", "porridge"),
        ("full", "sick", "tired", "picky"),
        ("hot", "old", "dry", "salty", "spicy", "stale", "cold"),
    ),
    (
        ("animal", "dog", "horse", "cow", "bear", "pig", "elephant", "camel", "sheep"),
        "fit",
        "through",
        ("door", "gate", "window", "hole", "tunnel"),
        ("big", "fat", "large", "tall"),
        ("small", "narrow", "tiny", "low"),
    ),
    (
        ("trophy", "box", "ball", "book", "toy", "bottle", "lamp", "guitar", "computer", "pillow"),
        "fit",
        "in",
        ("suitcase", "box", "bag", "drawer", "basket", "backpack"),
        ("big", "large", "heavy", "long"),
        ("small", "full", "narrow", "tiny"),
    ),
)
_WINOGRAD_AUX = ("did", "did", "could", "would")

_FRUITS = ("apple", "strawberry", "cherry", "plum", "apricot", "raspberry", "peach", "orange", "grape")
_TRAFFIC_PLACES = (
    "street",
    "road",
    "bridge",
    "highway",
    "avenue",
    "tunnel",
    "square",
    "crossing",
    "intersection",
)
_BREAD = ("toast", "bread", "pancake", "muffin", "biscuit", "bagel", "croissant", "waffle")


class _Builder:
    """Accumulates one sentence: tokens in order, heads patched once a head is placed."""

    __slots__ = ("tok", "pos", "head", "rel", "num", "agr", "senses", "coref", "names", "phen")

    def __init__(self) -> None:
        self.tok: list[str] = []
        self.pos: list[str] = []
        self.head: list[int] = []
        self.rel: list[str] = []
        self.num: list[str | None] = []  # "s" / "p" on nouns, for attractors
        self.agr: list[tuple[int, int, int]] = []
        self.senses: list[tuple[int, str]] = []
        self.coref: list[tuple[int, int]] = []
        self.names: list[tuple[int, int]] = []
        self.phen: set[str] = set()

    def add(self, tok: str, pos: str, rel: str, head: int = _PENDING, num: str | None = None) -> int:
        self.tok.append(tok)
        self.pos.append(pos)
        self.head.append(head)
        self.rel.append(rel)
        self.num.append(num)
        return len(self.tok) - 1

    def attach(self, dep: int, head: int, rel: str | None = None) -> None:
        self.head[dep] = head
        if rel is not None:
            self.rel[dep] = rel

    def attach_clause(self, clause: int, head: int, rel: str, phenomenon: str, *deps: int) -> None:
        """Attach a clause (its root ``clause``) to ``head`` as ``rel``, attach the clause's
        ``deps`` to its root (a conjunction, a ``that``, a subject; ``-1``: an optional one that
        was not drawn), and record the ``phenomenon`` the clause shows."""
        self.attach_optional(clause, *deps)
        self.attach(clause, head, rel)
        self.phen.add(phenomenon)

    def attach_optional(self, head: int, *deps: int) -> None:
        """Attach each of ``deps`` that was placed to ``head``; ``-1`` stands for an optional
        token that was not drawn (a comma, a ``that``, a preposition) and is skipped."""
        for dep in deps:
            if dep >= 0:
                self.head[dep] = head

    def record_agreement(self, subj: int, verb: int) -> None:
        if verb < 0:  # the verb form shows no number (past tense, modal)
            return
        attractor = -1
        for k in range(verb - 1, subj, -1):
            if self.num[k] is not None:
                attractor = k
                break
        self.agr.append((subj, verb, attractor))
        self.phen.add("agreement")
        if attractor >= 0 and self.num[attractor] != self.num[subj]:
            self.phen.add("attractor")

    def finish(self, topic: str | None) -> Sentence:
        tok = self.tok
        if tok[0][0].islower():
            tok[0] = tok[0][0].upper() + tok[0][1:]
        if _PENDING in self.head:
            raise RuntimeError(f"internal error: unattached token in {tok}")
        return Sentence(
            tokens=tuple(tok),
            pos=tuple(self.pos),
            heads=tuple(self.head),
            deprels=tuple(self.rel),
            topic=topic,
            phenomena=tuple(sorted(self.phen)),
            agreement=tuple(self.agr),
            senses=tuple(self.senses),
            coref=tuple(self.coref),
            names=tuple(self.names),
        )


@dataclass
class _Protagonist:
    name: tuple[str, ...]  # full name tokens
    gender: str  # "m" / "f"
    mentioned: bool = False  # already introduced in the document
    here: int = -1  # index of their name in the sentence being built, -1 if not there


@dataclass
class _Subject:
    head: int
    agr: str  # "1sg" / "3sg" / "pl"
    nominal: bool  # a noun or name (agreement worth recording), not a pronoun
    gender: str | None = None
    pronoun_ok: bool = True  # a coreferent pronoun can be derived
    extra: dict = field(default_factory=dict)


class Grammar:
    """The generator: one instance per corpus, holding the rng and precomputed pools."""

    def __init__(self, lex: Lexicon, rng: random.Random, cfg: CorpusConfig) -> None:
        self.lex = lex
        self.rng = rng
        self.cfg = cfg
        self.protagonist: _Protagonist | None = None
        self.doc_tense: str | None = None
        # noun pools per (topic, tag) and (None, tag), in file order
        self.pool: dict[tuple[str | None, str], list[Noun]] = {}
        for (topic, tag), nouns in lex.nouns_by_topic_tag.items():
            self.pool[(topic, tag)] = nouns
        for tag, nouns in lex.nouns_by_tag.items():
            self.pool[(None, tag)] = nouns
        self.by_lemma: dict[str, Noun] = {}
        for n in lex.nouns:
            if n.sense is None or n.lemma not in self.by_lemma:
                self.by_lemma.setdefault(n.lemma, n)
        # (verb, frame) pools per topic: the topic's own verbs plus the general ones
        general = [(v, f) for v in lex.verbs if v.topic == "general" for f in v.frames]
        self.frames: dict[str, list[tuple[Verb, Frame]]] = {}
        for topic in TOPICS:
            own = [(v, f) for v in lex.verbs if v.topic == topic for f in v.frames]
            # the topic's own verbs are listed twice so that they are drawn more often
            self.frames[topic] = own + own + general
        self.frames_of_kind: dict[tuple[str, str], list[tuple[Verb, Frame]]] = {}
        for topic in TOPICS:
            for kind in "ITPC":
                self.frames_of_kind[(topic, kind)] = [vf for vf in self.frames[topic] if vf[1].kind == kind]
        all_frames = [(v, f) for v in lex.verbs for f in v.frames]
        self.by_subj: dict[str, list[tuple[Verb, Frame]]] = {}
        self.by_obj: dict[str, list[tuple[Verb, Frame]]] = {}
        for v, f in all_frames:
            if f.kind in "ITP":
                for t in f.subj:
                    self.by_subj.setdefault(t, []).append((v, f))
            if f.kind == "T":
                for t in f.obj:
                    self.by_obj.setdefault(t, []).append((v, f))
        self.verb_by_lemma = {v.lemma: v for v in lex.verbs}
        # adjectives that fit each noun class
        self.adj_for_class: dict[str, list[str]] = {}
        for cls, tags in _class_tags().items():
            seen: dict[str, None] = {}
            for t in tags:
                for a in lex.adjectives_by_tag.get(t, ()):
                    seen.setdefault(a, None)
            self.adj_for_class[cls] = list(seen)
        self.ambiguous = sorted(lex.senses)
        kinds = [
            ("clause", cfg.w_clause),
            ("coordination", cfg.w_coordination),
            ("subordinate", cfg.w_subordinate),
            ("complement", cfg.w_complement),
            ("passive", cfg.w_passive),
            ("copula", cfg.w_copula),
            ("existential", cfg.w_existential),
            ("agreement", cfg.w_agreement),
            ("name", cfg.w_name),
            ("pronoun", cfg.w_pronoun),
            ("jam", cfg.w_jam),
            ("sense", cfg.w_sense),
        ]
        if any(w < 0 for _, w in kinds) or sum(w for _, w in kinds) <= 0:
            raise ValueError("CorpusConfig sentence-kind weights must be >= 0 and not all 0")
        self.kind_names = [k for k, _ in kinds]
        self.kind_cum = list(np.cumsum([w for _, w in kinds]))

    # ------------------------------------------------------------------ word choice

    def noun(self, tags: tuple[str, ...], topic: str | None) -> Noun:
        rng = self.rng
        tag = tags[0] if len(tags) == 1 else rng.choice(tags)
        if topic is not None and rng.random() < self.cfg.p_topic:
            pool = self.pool.get((topic, tag))
            if pool:
                return rng.choice(pool)
        return rng.choice(self.pool[(None, tag)])

    def name(self, gender: str | None = None) -> tuple[tuple[str, ...], str]:
        rng = self.rng
        r = rng.random()
        if r < 0.07:
            full = rng.choice(self.lex.characters)
            first = full.split()[0]
            g = "f" if first in self.lex.female_names or first in ("Alice", "Mary", "Hermione") else "m"
            if gender is None or gender == g:
                return tuple(full.split()), g
        g = gender or ("m" if rng.random() < 0.5 else "f")
        first = rng.choice(self.lex.male_names if g == "m" else self.lex.female_names)
        if r < 0.45:
            return (first, rng.choice(self.lex.surnames)), g
        return (first,), g

    # ------------------------------------------------------------------ phrases

    def add_name(self, b: _Builder, tokens: tuple[str, ...], rel: str) -> int:
        h = b.add(tokens[0], "PROPN", rel, num="s")
        for t in tokens[1:]:
            b.add(t, "PROPN", "flat", h)
        if len(tokens) > 1:
            b.names.append((h, h + len(tokens)))
            b.phen.add("name")
        return h

    def add_city(self, b: _Builder, rel: str, *, country: bool = False) -> int:
        city, land = self.rng.choice(self.lex.places)
        name = land if country else city
        toks = name.split()
        if toks[0] == "the":
            det = b.add("the", "DET", "det")
            h = self.add_name(b, tuple(toks[1:]), rel)
            b.attach(det, h)
            return h
        return self.add_name(b, tuple(toks), rel)

    def np(
        self,
        b: _Builder,
        noun: Noun,
        rel: str,
        depth: int,
        *,
        plural: bool | None = None,
        det: str | None = None,
        modify: bool = True,
        adjectives: bool = True,
    ) -> int:
        """Append a noun phrase headed by ``noun``; return the head's index."""
        rng, cfg = self.rng, self.cfg
        if plural is None:
            plural = noun.plural is not None and rng.random() < cfg.p_plural
        elif noun.plural is None:
            plural = False
        word = noun.plural if plural else noun.lemma
        # determiner
        pre: list[int] = []
        if det is None:
            r = rng.random()
            if noun.plural is None:  # mass noun
                det = (
                    ""
                    if r < 0.45
                    else ("the" if r < 0.85 else rng.choice(("some", "this", "that", "my", "our", "their")))
                )
            elif plural:
                det = (
                    "the"
                    if r < 0.4
                    else (
                        ""
                        if r < 0.62
                        else rng.choice(
                            ("some", "these", "those", "many", "my", "his", "her", "their", "our") + _NUMERALS
                        )
                    )
                )
            else:
                det = (
                    "the"
                    if r < 0.55
                    else (
                        "a"
                        if r < 0.82
                        else rng.choice(("this", "that", "my", "his", "her", "their", "our", "every"))
                    )
                )
        if det:
            if det in _POSS:
                pre.append(b.add(det, "PRON", "nmod:poss"))
            elif det in _NUMERALS:
                pre.append(b.add(det, "NUM", "nummod"))
            elif det in ("many", "several", "much"):
                pre.append(b.add(det, "ADJ", "amod"))
            else:
                pre.append(b.add(det, "DET", "det"))
        # adjectives
        if adjectives and rng.random() < cfg.p_adjective:
            cands = self.adj_for_class[noun.cls]
            if cands:
                a1 = rng.choice(cands)
                pre.append(b.add(a1, "ADJ", "amod"))
                if rng.random() < 0.15:
                    a2 = rng.choice(cands)
                    if a2 != a1:
                        pre.append(b.add(a2, "ADJ", "amod"))
        if det == "a":
            nxt = b.tok[pre[0] + 1] if len(pre) > 1 else word
            if _needs_an(nxt):
                b.tok[pre[0]] = "an"
        h = b.add(word, "NOUN", rel, num="p" if plural else "s")
        for k in pre:
            b.head[k] = h
        if noun.sense is not None:
            b.senses.append((h, noun.sense))
            b.phen.add("sense")
            if noun.lemma == "jam":
                b.phen.add("jam")
        if modify and depth < cfg.max_depth:
            r = rng.random()
            if r < cfg.p_pp_modifier:
                self.pp_modifier(b, noun, h, depth)
            elif r < cfg.p_pp_modifier + cfg.p_relative:
                self.relative(b, noun, h, depth)
        return h

    def pp_modifier(self, b: _Builder, noun: Noun, h: int, depth: int, topic: str | None = None) -> bool:
        options = _PP_MOD[noun.cls]
        if not options:
            return False
        prep, tags = self.rng.choice(options)
        inner = self.noun(tags, topic or noun.topic)
        if inner.lemma == noun.lemma:
            return False
        c = b.add(prep, "ADP", "case")
        n2 = self.np(b, inner, "nmod", depth + 1, modify=False)
        b.attach(c, n2)
        b.attach(n2, h)
        b.phen.add("pp_modifier")
        return True

    def relative(
        self,
        b: _Builder,
        noun: Noun,
        h: int,
        depth: int,
        *,
        subject_rel: bool | None = None,
        topic: str | None = None,
    ) -> bool:
        rng = self.rng
        if subject_rel is None:
            subject_rel = rng.random() < 0.5
        topic = topic or noun.topic
        tense = "present" if rng.random() < 0.5 else "past"
        pron = "who" if noun.cls == "person" else ("that" if rng.random() < 0.6 else "which")
        num = b.num[h]
        if subject_rel:
            cands = self.by_subj.get(noun.tags[0])
            if not cands:
                return False
            verb, frame = rng.choice(cands)
            if frame.kind == "I" and rng.random() < 0.5:  # prefer frames with an object
                verb, frame = rng.choice(cands)
            r = b.add(pron, "PRON", "nsubj")
            agr = "pl" if num == "p" else "3sg"
            v, agree = self.verb_group(b, verb, agr, tense, False)
            b.attach(r, v)
            b.attach(v, h, "acl:relcl")
            if agree >= 0:
                b.agr.append((h, agree, -1))
                b.phen.add("agreement")
            self.complement(b, frame, v, topic, depth + 1, modify=False)
        else:
            cands = self.by_obj.get(noun.tags[0])
            if not cands:
                return False
            verb, frame = rng.choice(cands)
            r = b.add("that" if pron == "which" else pron, "PRON", "obj")
            subj = self.subject(b, frame.subj, topic, depth + 1, modify=False)
            v, agree = self.verb_group(b, verb, subj.agr, tense, False)
            b.attach(r, v)
            b.attach(subj.head, v)
            b.attach(v, h, "acl:relcl")
            if agree >= 0 and subj.nominal:
                b.record_agreement(subj.head, agree)
        b.phen.add("relative_clause")
        return True

    def subject(
        self,
        b: _Builder,
        tags: tuple[str, ...],
        topic: str | None,
        depth: int,
        *,
        modify: bool = True,
        rel: str = "nsubj",
    ) -> _Subject:
        """Append a subject (noun phrase, name, pronoun or the document's protagonist)."""
        rng, cfg = self.rng, self.cfg
        person_ok = "person" in tags or "animate" in tags or "any" in tags
        if person_ok:
            p = self.protagonist
            if p is not None and rng.random() < 0.5:
                if p.here >= 0 or (p.mentioned and rng.random() < 0.6):
                    h = b.add("he" if p.gender == "m" else "she", "PRON", rel)
                    b.phen.add("pronoun")
                    if p.here >= 0:
                        b.coref.append((h, p.here))
                    return _Subject(h, "3sg", False, p.gender, pronoun_ok=False)
                p.mentioned = True
                h = self.add_name(b, p.name[:1] if rng.random() < 0.5 else p.name, rel)
                p.here = h
                return _Subject(h, "3sg", True, p.gender, pronoun_ok=False)
            r = rng.random()
            if r < cfg.p_pronoun:
                agr = rng.choice(("1sg", "3sg", "3sg", "pl", "pl"))
                pron = rng.choice(_SUBJ_PRON[agr])
                h = b.add(pron, "PRON", rel)
                return _Subject(h, agr, False, {"he": "m", "she": "f"}.get(pron), pronoun_ok=False)
            if r < cfg.p_pronoun + cfg.p_name:
                toks, g = self.name()
                h = self.add_name(b, toks, rel)
                return _Subject(h, "3sg", True, g)
            if r < cfg.p_pronoun + cfg.p_name + 0.04 and depth == 0:  # coordinated subject
                n1 = self.noun(tags, topic)
                h = self.np(b, n1, rel, depth + 1, modify=False)
                c = b.add("and", "CCONJ", "cc")
                n2 = self.noun((n1.cls,), topic)
                h2 = self.np(b, n2, "conj", depth + 1, modify=False)
                b.attach(c, h2)
                b.attach(h2, h)
                b.phen.add("coordination")
                return _Subject(h, "pl", False, pronoun_ok=False)
        n = self.noun(tags, topic)
        h = self.np(b, n, rel, depth, modify=modify)
        plural = b.num[h] == "p"
        gender = n.gender if n.cls == "person" else ("n" if n.cls != "person" else None)
        return _Subject(h, "pl" if plural else "3sg", True, gender)

    def verb_group(self, b: _Builder, verb: Verb, agr: str, tense: str, neg: bool) -> tuple[int, int]:
        """Append auxiliaries, negation and the verb; return (verb index, agreeing token or -1).

        Tenses: present, past, prog (is eating), pastprog (was eating), perfect (has eaten),
        modal (can eat).
        """
        rng = self.rng
        third = agr == "3sg"
        aux: list[int] = []
        agree = -1
        contracted = neg and rng.random() < 0.4
        if tense == "present" or tense == "past":
            if neg:
                form = ("does" if third else "do") if tense == "present" else "did"
                aux.append(b.add(form, "AUX", "aux"))
                if tense == "present":
                    agree = aux[-1]
                aux.append(b.add("n't" if contracted else "not", "PART", "advmod"))
                word = verb.lemma
            elif tense == "present":
                word = verb.s3 if third else verb.lemma
            else:
                word = verb.past
        elif tense in ("prog", "pastprog") and verb.lemma in _STATIVE:
            return self.verb_group(b, verb, agr, "present" if tense == "prog" else "past", neg)
        elif tense in ("prog", "pastprog"):
            form = _BE[("present" if tense == "prog" else "past", agr)]
            aux.append(b.add(form, "AUX", "aux"))
            agree = aux[-1] if form != "am" else -1
            if neg:
                aux.append(b.add("n't" if contracted and form != "am" else "not", "PART", "advmod"))
            word = verb.gerund
        elif tense == "perfect":
            aux.append(b.add("has" if third else "have", "AUX", "aux"))
            agree = aux[-1]
            if neg:
                aux.append(b.add("n't" if contracted else "not", "PART", "advmod"))
            word = verb.participle
        else:  # modal
            modal = rng.choice(_MODALS)
            if neg and modal in ("can", "will", "must", "might"):
                modal = rng.choice(("could", "should", "would"))
            aux.append(b.add(modal, "AUX", "aux"))
            if neg:
                aux.append(b.add("n't" if contracted else "not", "PART", "advmod"))
            word = verb.lemma
        if neg:
            b.phen.add("negation")
        v = b.add(word, "VERB", "root")
        for k in aux:
            b.head[k] = v
        if tense == "present" and not neg and agr != "1sg":
            agree = v  # eats / eat
        return v, agree

    def tense(self) -> str:
        r = self.rng.random()
        doc = self.doc_tense
        if doc == "past":
            return "past" if r < 0.75 else ("pastprog" if r < 0.85 else ("perfect" if r < 0.92 else "modal"))
        if doc == "present":
            return "present" if r < 0.7 else ("prog" if r < 0.82 else ("perfect" if r < 0.9 else "modal"))
        return (
            "present"
            if r < 0.36
            else "past"
            if r < 0.72
            else "prog"
            if r < 0.8
            else "pastprog"
            if r < 0.85
            else "perfect"
            if r < 0.93
            else "modal"
        )

    def complement(
        self, b: _Builder, frame: Frame, v: int, topic: str | None, depth: int, *, modify: bool = True
    ) -> None:
        """Append what the frame needs after the verb: object, PP or that-clause."""
        rng = self.rng
        if frame.kind == "T":
            if "person" in frame.obj and rng.random() < 0.1:
                toks, _ = self.name()
                self.add_name(b, toks, "obj")
                b.attach(len(b.tok) - len(toks), v)
                return
            o = self.np(b, self.noun(frame.obj, topic), "obj", depth, modify=modify)
            b.attach(o, v)
        elif frame.kind == "P":
            c = b.add(frame.prep, "ADP", "case")
            o = self.np(b, self.noun(frame.obj, topic), "obl", depth, modify=modify)
            b.attach(c, o)
            b.attach(o, v)
        elif frame.kind == "C":
            if depth >= self.cfg.max_depth:
                return
            m = b.add("that", "SCONJ", "mark") if rng.random() < 0.6 else -1
            c = self.clause(b, topic, depth + 1, kinds="ITP")
            b.attach_clause(c, v, "ccomp", "complement", m)

    def adjuncts(self, b: _Builder, v: int, topic: str | None, tense: str) -> None:
        rng, cfg = self.rng, self.cfg
        if rng.random() < cfg.p_adverb:
            b.add(rng.choice(_MANNER), "ADV", "advmod", v)
        if rng.random() < cfg.p_location:
            c = b.add(rng.choice(_LOC_PREPS), "ADP", "case")
            if rng.random() < cfg.p_city:
                b.tok[c] = "in"
                h = self.add_city(b, "obl")
            else:
                h = self.np(b, self.noun(("place",), topic), "obl", self.cfg.max_depth, adjectives=False)
            b.attach(c, h)
            b.attach(h, v)
        if rng.random() < cfg.p_time:
            r = rng.random()
            if tense in ("past", "pastprog") and r < 0.4:
                if rng.random() < 0.5:
                    b.add("yesterday", "ADV", "advmod", v)
                else:
                    a = b.add("last", "ADJ", "amod")
                    h = b.add(
                        rng.choice(("week", "night", "year", "summer", "winter")), "NOUN", "obl:tmod", v
                    )
                    b.attach(a, h)
            elif tense in ("present", "prog") and r < 0.4:
                if rng.random() < 0.5:
                    d = b.add("every", "DET", "det")
                    h = b.add(rng.choice(("day", "morning", "week", "evening")), "NOUN", "obl:tmod", v)
                    b.attach(d, h)
                else:
                    b.add(rng.choice(("today", "now")), "ADV", "advmod", v)
            elif r < 0.7:
                c = b.add("in", "ADP", "case")
                d = b.add("the", "DET", "det")
                h = b.add(rng.choice(("morning", "afternoon", "evening")), "NOUN", "obl", v)
                b.attach(c, h)
                b.attach(d, h)
            else:
                c = b.add("on", "ADP", "case")
                h = b.add(rng.choice(_DAYS), "PROPN", "obl", v)
                b.attach(c, h)

    # ------------------------------------------------------------------ clauses

    def clause(
        self,
        b: _Builder,
        topic: str | None,
        depth: int,
        *,
        kinds: str = "ITPC",
        subject_pronoun: tuple[str, str, int] | None = None,
        tense: str | None = None,
        force: Noun | None = None,
    ) -> int:
        """Append a clause; return its verb's index (its head is left for the caller).

        ``subject_pronoun = (pronoun, agr, antecedent)`` makes the subject a pronoun that
        refers back to ``antecedent``; ``force`` puts that noun in the clause (object or
        subject).
        """
        rng = self.rng
        topic_key = topic if topic is not None else rng.choice(TOPICS)
        tense = tense or self.tense()
        neg = rng.random() < self.cfg.p_negation
        force_subject = False
        if force is not None:
            tags = [t for t in force.tags if t != "any"]
            objs = [
                vf
                for vf in self.frames[topic_key]
                if vf[1].kind in "TP" and any(t in vf[1].obj for t in tags)
            ]
            if not objs:
                objs = [vf for t in tags for vf in self.by_obj.get(t, ())]
            subs = [vf for t in tags for vf in self.by_subj.get(t, ())]
            if objs and (not subs or rng.random() < 0.75):
                verb, frame = rng.choice(objs)
            else:
                verb, frame = rng.choice(subs)
                force_subject = True
        else:
            pool = self.frames[topic_key]
            if kinds != "ITPC":
                pool = [vf for k in kinds for vf in self.frames_of_kind[(topic_key, k)]]
            verb, frame = rng.choice(pool)
            if frame.kind == "C" and depth >= self.cfg.max_depth:
                verb, frame = rng.choice(self.frames_of_kind[(topic_key, "T")])
        # subject
        if subject_pronoun is not None and (
            "person" in frame.subj or "animate" in frame.subj or "any" in frame.subj
        ):
            pron, agr, ante = subject_pronoun
            h = b.add(pron, "PRON", "nsubj")
            b.coref.append((h, ante))
            b.phen.add("pronoun")
            subj = _Subject(h, agr, False)
        elif force_subject:
            h = self.np(b, force, "nsubj", depth)
            subj = _Subject(h, "pl" if b.num[h] == "p" else "3sg", True)
        else:
            subj = self.subject(b, frame.subj, topic, depth)
        if tense in ("present", "past") and not neg and rng.random() < 0.06:
            freq = b.add(rng.choice(_FREQ), "ADV", "advmod")
        else:
            freq = -1
        v, agree = self.verb_group(b, verb, subj.agr, tense, neg)
        b.attach(subj.head, v)
        b.attach_optional(v, freq)
        if agree >= 0 and subj.nominal:
            b.record_agreement(subj.head, agree)
        if force is not None and not force_subject:
            if frame.kind == "T":
                o = self.np(b, force, "obj", depth)
            else:
                c = b.add(frame.prep, "ADP", "case")
                o = self.np(b, force, "obl", depth)
                b.attach(c, o)
            b.attach(o, v)
        else:
            self.complement(b, frame, v, topic, depth)
        if depth == 0 or rng.random() < 0.3:
            self.adjuncts(b, v, topic, tense)
        return v

    # ------------------------------------------------------------------ sentence kinds

    def sentence(self, topic: str, kind: str | None = None) -> Sentence:
        if kind is None:
            r = self.rng.random() * self.kind_cum[-1]
            k = 0
            while self.kind_cum[k] < r:
                k += 1
            kind = self.kind_names[k]
        b = _Builder()
        root = getattr(self, "_s_" + kind)(b, topic)
        b.attach(root, -1, "root")
        b.add(".", "PUNCT", "punct", root)
        return b.finish(topic)

    def _s_clause(self, b: _Builder, topic: str) -> int:
        return self.clause(b, topic, 0)

    def _s_coordination(self, b: _Builder, topic: str) -> int:
        v1 = self.clause(b, topic, 1, kinds="ITP")
        comma = b.add(",", "PUNCT", "punct") if self.rng.random() < 0.6 else -1
        cc = b.add(self.rng.choice(("and", "and", "but", "so")), "CCONJ", "cc")
        v2 = self.clause(b, topic, 1, kinds="ITP")
        b.attach_clause(v2, v1, "conj", "coordination", cc, comma)
        return v1

    def _s_subordinate(self, b: _Builder, topic: str) -> int:
        rng = self.rng
        sub = rng.choice(_SUBORD)
        if rng.random() < 0.35:  # fronted: When it rained, the children stayed at home.
            m = b.add(sub, "SCONJ", "mark")
            v2 = self.clause(b, topic, 1, kinds="ITP")
            b.add(",", "PUNCT", "punct", v2)  # the comma closes the fronted clause
            v1 = self.clause(b, topic, 1, kinds="ITP")
        else:
            v1 = self.clause(b, topic, 1, kinds="ITP")
            m = b.add(sub, "SCONJ", "mark")
            v2 = self.clause(b, topic, 1, kinds="ITP")
        b.attach_clause(v2, v1, "advcl", "subordinate", m)
        return v1

    def _s_complement(self, b: _Builder, topic: str) -> int:
        rng = self.rng
        verb, frame = rng.choice(self.frames_of_kind[(topic, "C")])
        subj = self.subject(b, ("person",), topic, 1, modify=False)
        tense = self.tense()
        v, agree = self.verb_group(b, verb, subj.agr, tense, rng.random() < self.cfg.p_negation)
        b.attach(subj.head, v)
        if agree >= 0 and subj.nominal:
            b.record_agreement(subj.head, agree)
        m = b.add("that", "SCONJ", "mark") if rng.random() < 0.7 else -1
        sp = None
        if subj.pronoun_ok and subj.gender in ("m", "f") and rng.random() < 0.5:
            sp = ("he" if subj.gender == "m" else "she", "3sg", subj.head)
        elif subj.pronoun_ok and subj.agr == "pl" and rng.random() < 0.5:
            sp = ("they", "pl", subj.head)
        c = self.clause(b, topic, 1, kinds="ITP", subject_pronoun=sp)
        b.attach_clause(c, v, "ccomp", "complement", m)
        return v

    def _s_passive(self, b: _Builder, topic: str) -> int:
        rng = self.rng
        verb, frame = rng.choice(self.frames_of_kind[(topic, "T")])
        h = self.np(b, self.noun(frame.obj, topic), "nsubj:pass", 1)
        agr = "pl" if b.num[h] == "p" else "3sg"
        tense = "present" if rng.random() < 0.4 else "past"
        aux = b.add(_BE[(tense, agr)], "AUX", "aux:pass")
        neg = b.add("not", "PART", "advmod") if rng.random() < self.cfg.p_negation else -1
        v = b.add(verb.participle, "VERB", "root")
        b.attach(aux, v)
        b.attach(h, v)
        if neg >= 0:
            b.attach(neg, v)
            b.phen.add("negation")
        b.record_agreement(h, aux)
        if rng.random() < 0.6:
            c = b.add("by", "ADP", "case")
            s = self.subject(b, frame.subj, topic, 1, modify=False, rel="obl:agent")
            b.attach(c, s.head)
            b.attach(s.head, v)
        b.phen.add("passive")
        if rng.random() < 0.5:
            self.adjuncts(b, v, topic, tense)
        return v

    def _s_copula(self, b: _Builder, topic: str) -> int:
        rng = self.rng
        tense = "present" if rng.random() < 0.5 else "past"
        r = rng.random()
        if r < 0.5:  # the soup is very hot
            n = self.noun(("any",), topic)
            while not self.adj_for_class[n.cls]:
                n = self.noun(("any",), topic)
            h = self.np(b, n, "nsubj", 1)
            agr = "pl" if b.num[h] == "p" else "3sg"
            cop = b.add(_BE[(tense, agr)], "AUX", "cop")
            neg = b.add("not", "PART", "advmod") if rng.random() < self.cfg.p_negation else -1
            adv = (
                b.add(rng.choice(("very", "too", "quite", "really")), "ADV", "advmod")
                if rng.random() < 0.3
                else -1
            )
            root = b.add(rng.choice(self.adj_for_class[n.cls]), "ADJ", "root")
            b.attach_optional(root, h, cop, neg, adv)
        elif r < 0.75:  # the cat is in the garden
            s = self.subject(b, ("physical",), topic, 1)
            cop = b.add(_BE[(tense, s.agr)], "AUX", "cop")
            c = b.add(rng.choice(("in", "near", "behind", "at")), "ADP", "case")
            root = self.np(b, self.noun(("place",), topic), "root", 2, adjectives=False)
            for k in (s.head, cop, c):
                b.attach(k, root)
            h = s.head
            if not s.nominal:
                return root
        else:  # Anna is a teacher / the boys are students
            s = self.subject(b, ("person",), topic, 1, modify=False)
            cop = b.add(_BE[(tense, s.agr)], "AUX", "cop")
            role = self.noun(("person",), topic)
            for _ in range(10):
                if role.gender is None or s.gender is None or role.gender == s.gender:
                    break
                role = self.noun(("person",), topic)
            root = self.np(
                b, role, "root", 2, plural=s.agr == "pl", det="a" if s.agr != "pl" else "", modify=False
            )
            b.attach(s.head, root)
            b.attach(cop, root)
            h = s.head
            if not s.nominal:
                return root
        b.record_agreement(h, cop)
        b.phen.add("copula")
        return root

    def _s_existential(self, b: _Builder, topic: str) -> int:
        rng = self.rng
        tense = "present" if rng.random() < 0.6 else "past"
        ex = b.add("there", "PRON", "expl")
        cop = b.add("is", "VERB", "root")
        n = self.noun(("physical",), topic)
        if n.plural is None:
            det = rng.choice(("some", "", "much"))
            plural = False
        else:
            plural = rng.random() < 0.4
            det = rng.choice(("some", "two", "three", "many", "several", "")) if plural else "a"
        h = self.np(b, n, "nsubj", 1, det=det, plural=plural)
        b.tok[cop] = _BE[(tense, "pl" if b.num[h] == "p" else "3sg")]
        b.attach(ex, cop)
        b.attach(h, cop)
        b.record_agreement(h, cop)
        c = b.add(rng.choice(("in", "near", "on", "behind")), "ADP", "case")
        p = self.np(b, self.noun(("place",), topic), "obl", 2, adjectives=False)
        b.attach(c, p)
        b.attach(p, cop)
        b.phen.add("existential")
        return cop

    def _s_agreement(self, b: _Builder, topic: str) -> int:
        """A subject whose PP or relative clause holds a noun of the other number."""
        rng = self.rng
        verb, frame = rng.choice([vf for vf in self.frames[topic] if vf[1].kind in "ITP"])
        for _ in range(10):
            n = self.noun(frame.subj, topic)
            if n.plural is not None and _PP_MOD[n.cls]:
                break
        else:
            return self.clause(b, topic, 0)
        plural = rng.random() < 0.5
        h = self.np(b, n, "nsubj", 2, plural=plural, modify=False)
        if rng.random() < 0.6:
            # PP with a noun of the other number: the keys to the cabinet
            prep, tags = rng.choice(_PP_MOD[n.cls])
            c = b.add(prep, "ADP", "case")
            for _ in range(10):
                inner = self.noun(tags, topic)
                if inner.plural is not None:
                    break
            n2 = self.np(b, inner, "nmod", 2, plural=not plural, modify=False)
            b.attach(c, n2)
            b.attach(n2, h)
            b.phen.add("pp_modifier")
        else:
            # object relative clause with a subject of the other number: the cake that the boys like
            cands = self.by_obj.get(n.tags[0])
            if not cands:
                return self.clause(b, topic, 0)
            v2, f2 = rng.choice(cands)
            r = b.add("that", "PRON", "obj")
            for _ in range(10):
                inner = self.noun(f2.subj, topic)
                if inner.plural is not None:
                    break
            s2 = self.np(b, inner, "nsubj", 2, plural=not plural, modify=False)
            rv, ra = self.verb_group(b, v2, "pl" if b.num[s2] == "p" else "3sg", "past", False)
            b.attach_clause(rv, h, "acl:relcl", "relative_clause", r, s2)
        tense = rng.choice(("present", "present", "prog", "perfect", "pastprog"))
        v, agree = self.verb_group(
            b, verb, "pl" if plural else "3sg", tense, rng.random() < self.cfg.p_negation
        )
        b.attach(h, v)
        b.record_agreement(h, agree)
        self.complement(b, frame, v, topic, 2, modify=False)
        return v

    def _s_name(self, b: _Builder, topic: str) -> int:
        rng = self.rng
        r = rng.random()
        if r < 0.4:  # New York is a big city in the United States.
            h = self.add_city(b, "nsubj")
            city = " ".join(b.tok[h:])
            land = next(c for name, c in self.lex.places if name == city)
            cop = b.add("is", "AUX", "cop")
            d = b.add("a", "DET", "det")
            adj = (
                b.add(
                    rng.choice(("big", "busy", "beautiful", "famous", "large", "old", "modern", "crowded")),
                    "ADJ",
                    "amod",
                )
                if rng.random() < 0.6
                else -1
            )
            if adj >= 0 and _needs_an(b.tok[adj]):
                b.tok[d] = "an"
            root = b.add("city", "NOUN", "root")
            b.attach_optional(root, h, cop, d, adj)
            b.record_agreement(h, cop)
            if rng.random() < 0.7:
                c = b.add("in", "ADP", "case")
                toks = land.split()
                if toks[0] == "the":
                    dd = b.add("the", "DET", "det")
                    n = self.add_name(b, tuple(toks[1:]), "nmod")
                    b.attach(dd, n)
                else:
                    n = self.add_name(b, tuple(toks), "nmod")
                b.attach(c, n)
                b.attach(n, root)
            return root
        # a person with a (often multi-token) name does something, often in a city
        toks, g = self.name()
        if len(toks) == 1 and rng.random() < 0.6:
            toks = (toks[0], rng.choice(self.lex.surnames))
        h = self.add_name(b, toks, "nsubj")
        verb = self.verb_by_lemma[
            rng.choice(("visit", "live", "travel", "fly", "leave", "love", "reach", "work"))
        ]
        tense = rng.choice(("present", "past", "past", "perfect"))
        v, agree = self.verb_group(b, verb, "3sg", tense, False)
        b.attach(h, v)
        if agree >= 0:
            b.record_agreement(h, agree)
        if verb.lemma in ("visit", "leave", "love", "reach"):
            o = self.add_city(b, "obj")
        else:
            prep = {"live": "in", "work": "in", "travel": "to", "fly": "to"}[verb.lemma]
            c = b.add(prep, "ADP", "case")
            o = self.add_city(b, "obl")
            b.attach(c, o)
        b.attach(o, v)
        if rng.random() < 0.3:
            self.adjuncts(b, v, topic, tense)
        return v

    def _s_pronoun(self, b: _Builder, topic: str) -> int:
        """The animal didn't cross the street because it was too tired / too wide."""
        return self.winograd(b, self.rng.random() < 0.5)

    def winograd(
        self, b: _Builder, refers_to_subject: bool, schema: int | None = None, choices: dict | None = None
    ) -> int:
        rng = self.rng
        k = rng.randrange(len(_WINOGRAD)) if schema is None else schema
        subjects, verb_lemma, prep, objects, subj_adj, obj_adj = _WINOGRAD[k]
        ch = choices if choices is not None else {}
        s_word = ch.setdefault("subject", rng.choice(subjects))
        o_word = ch.setdefault("object", rng.choice(objects))
        aux_word = ch.setdefault("aux", rng.choice(_WINOGRAD_AUX))
        contracted = ch.setdefault("contracted", rng.random() < 0.6)
        det = ch.setdefault("det", rng.choice(("the", "the", "the", "my", "that")))
        adj = rng.choice(subj_adj if refers_to_subject else obj_adj)
        d = b.add(det, "PRON" if det == "my" else "DET", "nmod:poss" if det == "my" else "det")
        s = b.add(s_word, "NOUN", "nsubj", num="s")
        b.attach(d, s)
        a = b.add(aux_word, "AUX", "aux")
        n = b.add("n't" if contracted else "not", "PART", "advmod")
        v = b.add(verb_lemma, "VERB", "root")
        for x in (s, a, n):
            b.attach(x, v)
        c = b.add(prep, "ADP", "case") if prep else -1
        d2 = b.add("the", "DET", "det")
        o = b.add(o_word, "NOUN", "obl" if prep else "obj", v, num="s")
        b.attach(d2, o)
        b.attach_optional(o, c)
        m = b.add("because", "SCONJ", "mark")
        it = b.add("it", "PRON", "nsubj")
        cop = b.add("was", "AUX", "cop")
        too = b.add("too", "ADV", "advmod")
        root2 = b.add(adj, "ADJ", "advcl", v)
        for x in (m, it, cop, too):
            b.attach(x, root2)
        b.coref.append((it, s if refers_to_subject else o))
        b.phen.update(("pronoun", "subordinate", "negation"))
        for word, idx in ((s_word, s), (o_word, o)):
            noun = self.by_lemma.get(word)
            if noun is not None and noun.sense is not None:
                b.senses.append((idx, noun.sense))
                b.phen.add("sense")
        return v

    def _s_jam(self, b: _Builder, topic: str) -> int:
        return self.jam(b, self.rng.choice(("traffic", "fruit", "both")))

    def jam(self, b: _Builder, sense: str) -> int:
        """Sentences in which only the context tells which *jam* is meant."""
        rng = self.rng
        b.phen.update(("jam", "sense"))
        if sense == "both":  # There is a traffic jam, so I began to eat my apple jam.
            ex = b.add("there", "PRON", "expl")
            be = b.add(rng.choice(("is", "was")), "VERB", "root")
            d = b.add("a", "DET", "det")
            cmp_ = b.add("traffic", "NOUN", "compound", num="s")
            j1 = b.add("jam", "NOUN", "nsubj", be, num="s")
            for x in (d, cmp_):
                b.attach(x, j1)
            b.attach(ex, be)
            b.record_agreement(j1, be)
            comma = b.add(",", "PUNCT", "punct")
            so = b.add("so", "CCONJ", "cc")
            toks, g = self.name() if rng.random() < 0.4 else ((rng.choice(("I", "she", "he", "we")),), None)
            if g is None:
                s = b.add(toks[0], "PRON", "nsubj")
                poss = {"I": "my", "she": "her", "he": "his", "we": "our"}[toks[0]]
            else:
                s = self.add_name(b, toks, "nsubj")
                poss = "his" if g == "m" else "her"
            began = b.add(rng.choice(("began", "started")), "VERB", "conj", be)
            for x in (comma, so, s):
                b.attach(x, began)
            to = b.add("to", "PART", "mark")
            eat = b.add(rng.choice(("eat", "eat", "taste")), "VERB", "xcomp", began)
            b.attach(to, eat)
            p = b.add(poss, "PRON", "nmod:poss")
            f = b.add(rng.choice(_FRUITS), "NOUN", "compound", num="s")
            j2 = b.add("jam", "NOUN", "obj", eat, num="s")
            b.attach(p, j2)
            b.attach(f, j2)
            b.senses.extend(((j1, "traffic"), (j2, "fruit")))
            return be
        if sense == "traffic":
            r = rng.random()
            adj = rng.choice(("long", "huge", "terrible", "big", "slow")) if rng.random() < 0.5 else None
            compound = rng.random() < 0.5

            def jam_np(rel: str, det: str) -> int:
                pre = [b.add(det, "DET", "det")]
                if adj:
                    pre.append(b.add(adj, "ADJ", "amod"))
                if det == "a" and _needs_an(b.tok[pre[0] + 1] if adj else ("traffic" if compound else "jam")):
                    b.tok[pre[0]] = "an"
                if compound:
                    pre.append(b.add("traffic", "NOUN", "compound", num="s"))
                j = b.add("jam", "NOUN", rel, num="s")
                for x in pre:
                    b.attach(x, j)
                b.senses.append((j, "traffic"))
                return j

            def place(head: int, prep: str) -> None:
                c = b.add(prep, "ADP", "case")
                p = self.np(b, self.by_lemma[rng.choice(_TRAFFIC_PLACES)], "obl", 2, det="the", modify=False)
                b.attach(c, p)
                b.attach(p, head)

            if r < 0.35:  # There was a long jam on the bridge.
                ex = b.add("there", "PRON", "expl")
                be = b.add(rng.choice(("is", "was")), "VERB", "root")
                b.attach(ex, be)
                j = jam_np("nsubj", "a")
                b.attach(j, be)
                b.record_agreement(j, be)
                place(be, rng.choice(("on", "near", "in")))
                return be
            if r < 0.7:  # The bus was stuck in a jam on the highway.
                subj_noun = self.by_lemma[
                    rng.choice(("bus", "car", "taxi", "truck", "driver", "passenger", "ambulance", "van"))
                ]
                s = self.np(b, subj_noun, "nsubj:pass", 2, modify=False)
                aux = b.add(_BE[("past", "pl" if b.num[s] == "p" else "3sg")], "AUX", "aux:pass")
                v = b.add("stuck", "VERB", "root")
                b.attach(s, v)
                b.attach(aux, v)
                b.record_agreement(s, aux)
                c = b.add("in", "ADP", "case")
                j = jam_np("obl", "a")
                b.attach(c, j)
                b.attach(j, v)
                if rng.random() < 0.6:
                    place(v, rng.choice(("on", "near")))
                return v
            # A long jam blocked the road.
            j = jam_np("nsubj", rng.choice(("a", "the")))
            v = b.add(rng.choice(("blocked", "filled", "closed")), "VERB", "root")
            b.attach(j, v)
            p = self.np(b, self.by_lemma[rng.choice(_TRAFFIC_PLACES)], "obj", 2, det="the", modify=False)
            b.attach(p, v)
            return v
        # fruit jam
        r = rng.random()
        fruit = rng.choice(_FRUITS) if rng.random() < 0.5 else None

        def jam_obj(rel: str, det: str) -> int:
            pre = []
            if det:
                pre.append(
                    b.add(det, "PRON" if det in _POSS else "DET", "nmod:poss" if det in _POSS else "det")
                )
            if fruit:
                pre.append(b.add(fruit, "NOUN", "compound", num="s"))
            j = b.add("jam", "NOUN", rel, num="s")
            for x in pre:
                b.attach(x, j)
            b.senses.append((j, "fruit"))
            return j

        if r < 0.6:  # Anna spread some jam on the toast.
            s = self.subject(b, ("person",), "food", 2, modify=False)
            verb = self.verb_by_lemma[rng.choice(("eat", "buy", "cook", "taste", "love", "want", "share"))]
            tense = rng.choice(("present", "past", "past"))
            v, agree = self.verb_group(b, verb, s.agr, tense, False)
            b.attach(s.head, v)
            if agree >= 0 and s.nominal:
                b.record_agreement(s.head, agree)
            j = jam_obj("obj", rng.choice(("", "some", "the", "my", "her", "his")))
            b.attach(j, v)
            if rng.random() < 0.6:
                c = b.add(rng.choice(("with", "on")), "ADP", "case")
                bread = self.np(b, self.by_lemma[rng.choice(_BREAD)], "obl", 2, modify=False)
                b.attach(c, bread)
                b.attach(bread, v)
            return v
        # The jam on the toast was sweet.
        j = jam_obj("nsubj", "the")
        if rng.random() < 0.5:
            c = b.add(rng.choice(("on", "in")), "ADP", "case")
            n = self.np(
                b,
                self.by_lemma[rng.choice(_BREAD + ("jar", "bowl", "plate"))],
                "nmod",
                2,
                det="the",
                modify=False,
            )
            b.attach(c, n)
            b.attach(n, j)
        cop = b.add(rng.choice(("is", "was")), "AUX", "cop")
        root = b.add(rng.choice(("sweet", "sticky", "delicious", "fresh", "homemade", "sour")), "ADJ", "root")
        b.attach(j, root)
        b.attach(cop, root)
        b.record_agreement(j, cop)
        return root

    def _s_sense(self, b: _Builder, topic: str) -> int:
        """Another ambiguous noun (bank, bat, mouse, ...) in a sentence of its sense's topic."""
        rng = self.rng
        lemma = rng.choice(self.ambiguous)
        noun = rng.choice(self.lex.senses[lemma])
        return self.clause(b, noun.topic, 1, force=noun, kinds="ITP")

    def forced_sentence(self, noun: Noun) -> Sentence:
        """A clause of ``noun``'s topic that contains ``noun`` (as object or subject)."""
        b = _Builder()
        root = self.clause(b, noun.topic, 1, force=noun, kinds="ITP")
        b.attach(root, -1, "root")
        b.add(".", "PUNCT", "punct", root)
        return b.finish(noun.topic)

    def winograd_pair(self) -> tuple[Sentence, Sentence]:
        """The same Winograd-style sentence twice, "it" = the subject, then "it" = the object."""
        schema = self.rng.randrange(len(_WINOGRAD))
        choices: dict = {}
        out = []
        for to_subject in (True, False):
            b = _Builder()
            root = self.winograd(b, to_subject, schema, choices)
            b.attach(root, -1, "root")
            b.add(".", "PUNCT", "punct", root)
            out.append(b.finish("animals"))
        return out[0], out[1]

    # ------------------------------------------------------------------ documents

    def document(self, topic: str, n_sentences: int) -> Document:
        rng = self.rng
        self.doc_tense = "past" if rng.random() < 0.7 else "present"
        toks, g = self.name()
        self.protagonist = _Protagonist(toks, g)
        sentences = [self.intro(topic)]
        # a plain clause four times as often as each other construction
        others = ("coordination", "subordinate", "complement", "passive", "copula", "existential")
        kinds = ("clause",) * 4 + others
        for _ in range(n_sentences - 1):
            self.protagonist.here = -1
            b = _Builder()
            marker = b.add(rng.choice(_MARKERS), "ADV", "advmod") if rng.random() < 0.3 else -1
            kind = rng.choice(kinds)
            root = getattr(self, "_s_" + kind)(b, topic)
            b.attach_optional(root, marker)
            b.attach(root, -1, "root")
            b.add(".", "PUNCT", "punct", root)
            sentences.append(b.finish(topic))
        self.protagonist = None
        self.doc_tense = None
        return Document(tuple(sentences), topic)

    def intro(self, topic: str) -> Sentence:
        """First sentence of a document: introduce the protagonist by full name."""
        rng = self.rng
        p = self.protagonist
        b = _Builder()
        tense = "past" if self.doc_tense == "past" else "present"
        h = self.add_name(b, p.name, "nsubj")
        p.mentioned = True
        r = rng.random()
        if r < 0.5:  # Anna Smith was a young cook.
            cop = b.add(_BE[(tense, "3sg")], "AUX", "cop")
            roles = [
                n
                for n in self.pool.get((topic, "person")) or self.pool[(None, "person")]
                if n.gender in (None, p.gender)
            ]
            role = rng.choice(roles)
            root = self.np(b, role, "root", 2, plural=False, det="a", modify=False)
            b.attach(h, root)
            b.attach(cop, root)
            b.record_agreement(h, cop)
            if rng.random() < 0.5:
                c = b.add("in", "ADP", "case")
                n = self.add_city(b, "nmod")
                b.attach(c, n)
                b.attach(n, root)
        else:  # Anna Smith lived near the market.
            verb = self.verb_by_lemma[rng.choice(("live", "work"))]
            v, agree = self.verb_group(b, verb, "3sg", tense, False)
            b.attach(h, v)
            if tense == "present":
                b.record_agreement(h, v)
            c = b.add(rng.choice(("in", "near")), "ADP", "case")
            place = self.np(b, self.noun(("place",), topic), "obl", 2, det="the", modify=False)
            b.attach(c, place)
            b.attach(place, v)
            root = v
        b.attach(root, -1, "root")
        b.add(".", "PUNCT", "punct", root)
        return b.finish(topic)


def _class_tags() -> dict[str, tuple[str, ...]]:
    return {cls: tuple(t for t in tags if t != "any") for cls, tags in CLASS_TAGS.items()}


def _needs_an(word: str) -> bool:
    w = word.lower()
    if w in _AN_EXCEPTIONS_AN:
        return True
    if w in _AN_EXCEPTIONS_A:
        return False
    return w[:1] in "aeiou"


# --------------------------------------------------------------------------- public generators


def _check_topics(topics) -> tuple[str, ...]:
    if topics is None:
        return TOPICS
    topics = tuple(topics)
    bad = [t for t in topics if t not in TOPICS]
    if bad or not topics:
        raise ValueError(f"unknown topics {bad}; choose from {list(TOPICS)}")
    return topics


def generate_corpus(
    n_sentences: int,
    *,
    seed: int = 0,
    topics=None,
    config: CorpusConfig | None = None,
    kind: str | None = None,
) -> list[Sentence]:
    """``n_sentences`` independent sentences, each on a random topic; same seed, same corpus.

    ``kind`` restricts every sentence to one construction (``"clause"``, ``"agreement"``,
    ``"pronoun"``, ``"jam"``, ``"name"``, ``"sense"``, ``"passive"``, ...).
    """
    if not isinstance(n_sentences, int) or n_sentences < 0:
        raise ValueError(f"n_sentences must be a non-negative int, got {n_sentences!r}")
    topics = _check_topics(topics)
    rng = random.Random(seed)
    g = Grammar(load_lexicon(), rng, config or CorpusConfig())
    if kind is not None and kind not in g.kind_names:
        raise ValueError(f"unknown sentence kind {kind!r}; choose from {g.kind_names}")
    choice = rng.choice
    return [g.sentence(choice(topics), kind) for _ in range(n_sentences)]


def generate_documents(
    n_docs: int,
    *,
    seed: int = 0,
    sentences: tuple[int, int] = (3, 8),
    topics=None,
    config: CorpusConfig | None = None,
) -> list[Document]:
    """``n_docs`` documents of ``sentences[0]..sentences[1]`` sentences, each on one topic.

    A document introduces a protagonist by full name, then mixes sentences about them (by
    name or pronoun) with other sentences on the same topic, in one tense.
    """
    if not isinstance(n_docs, int) or n_docs < 0:
        raise ValueError(f"n_docs must be a non-negative int, got {n_docs!r}")
    lo, hi = sentences
    if not 1 <= lo <= hi:
        raise ValueError(f"sentences must be (min, max) with 1 <= min <= max, got {sentences!r}")
    topics = _check_topics(topics)
    rng = random.Random(seed)
    g = Grammar(load_lexicon(), rng, config or CorpusConfig())
    return [g.document(rng.choice(topics), rng.randint(lo, hi)) for _ in range(n_docs)]


def corpus_stats(sentences) -> dict:
    """Counts for the book: sentences, tokens, vocabulary, lengths, phenomenon frequencies."""
    sentences = list(sentences)
    if not sentences:
        raise ValueError("corpus_stats needs at least one sentence")
    lengths = np.array([len(s) for s in sentences])
    vocab: dict[str, None] = {}
    phen: dict[str, int] = {p: 0 for p in PHENOMENA}
    for s in sentences:
        for t in s.tokens:
            vocab[t] = None
        for p in s.phenomena:
            phen[p] = phen.get(p, 0) + 1
    return {
        "sentences": len(sentences),
        "tokens": int(lengths.sum()),
        "vocabulary": len(vocab),
        "length_mean": float(lengths.mean()),
        "length_min": int(lengths.min()),
        "length_max": int(lengths.max()),
        "phenomena": {p: phen[p] / len(sentences) for p in phen},
    }


def _benchmark(n: int, seed: int) -> None:
    t0 = time.perf_counter()
    sents = generate_corpus(n, seed=seed)
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    docs = generate_documents(max(1, n // 5), seed=seed)
    dt_docs = time.perf_counter() - t0
    n_doc_sents = sum(len(d) for d in docs)
    stats = corpus_stats(sents)
    print(f"generate_corpus: {n} sentences in {dt:.2f} s = {n / dt * 60:,.0f} sentences/minute (one core)")
    print(
        f"generate_documents: {len(docs)} documents, {n_doc_sents} sentences in {dt_docs:.2f} s "
        f"= {n_doc_sents / dt_docs * 60:,.0f} sentences/minute"
    )
    print(
        f"tokens {stats['tokens']:,}, vocabulary {stats['vocabulary']:,}, "
        f"length mean {stats['length_mean']:.1f} (min {stats['length_min']}, max {stats['length_max']})"
    )
    for p, f in stats["phenomena"].items():
        print(f"  {p:16s} {f:6.1%}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Generate the course corpus or measure its speed.")
    parser.add_argument("--benchmark", action="store_true", help="time the generation and print statistics")
    parser.add_argument("-n", type=int, default=100_000, help="number of sentences")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--conllu", action="store_true", help="print the sentences as CoNLL-U")
    args = parser.parse_args(argv)
    if args.benchmark:
        _benchmark(args.n, args.seed)
    elif args.conllu:
        print(to_conllu(generate_corpus(args.n, seed=args.seed)), end="")
    else:
        for s in generate_corpus(args.n, seed=args.seed):
            print(s.text)


if __name__ == "__main__":
    main()
