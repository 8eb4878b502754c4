"""The English lexicon behind the generated corpus.

The word lists live as small tab-separated files in ``course_lib/data/lexicon/`` (about
2,300 lemmas, 3,500 word forms):

* ``nouns.tsv``: lemma, plural (``-`` for a mass noun such as *bread*), semantic class
  (person, animal, food, vehicle, place, ...), topic (food, city, animals, school, ...),
  gender for people, and a sense label for the words that have more than one meaning
  (*jam* = fruit / traffic, *bank* = money / river, *bat* = animal / sports, ...);
* ``verbs.tsv``: lemma, 3rd-person singular, past, participle, gerund, topic and argument
  frames, e.g. ``T:animate>food`` (a transitive verb whose subject is animate and whose
  object is food) or ``P:person>at>physical`` (a prepositional verb);
* ``adjectives.tsv``: adjective and the noun tags it fits (*hungry* fits ``animate``,
  *delicious* fits ``food``);
* ``names.tsv`` and ``places.tsv``: first names with gender, surnames, fixed multi-token
  names (*Harry Potter*), and cities with their countries (*New York*, *the United States*).

Inflected forms were produced once with the ``lemminflect`` package and checked by hand;
the files, not that tool, are the source of truth. Semantic *tags* are what verb frames and
adjectives select for: each noun class carries its own name plus broader tags
(``person`` -> ``person, animate, physical, any``; movable things also carry ``thing``), so
``eat`` (``T:animate>food``) takes people and animals as subjects and only food as object.
That is what keeps the generated sentences from being word salad.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources

__all__ = [
    "CLASS_TAGS",
    "TOPICS",
    "Noun",
    "Frame",
    "Verb",
    "Lexicon",
    "load_lexicon",
]

#: The tags each noun class carries (verb frames and adjectives select nouns by tag).
CLASS_TAGS: dict[str, tuple[str, ...]] = {
    "person": ("person", "animate", "physical", "any"),
    "animal": ("animal", "animate", "physical", "any"),
    "food": ("food", "thing", "physical", "ownable", "any"),
    "drink": ("drink", "thing", "physical", "ownable", "any"),
    "vehicle": ("vehicle", "thing", "physical", "ownable", "any"),
    "place": ("place", "physical", "any"),
    "object": ("object", "thing", "physical", "ownable", "any"),
    "text": ("text", "thing", "object", "physical", "ownable", "any"),
    "instrument": ("instrument", "thing", "object", "physical", "ownable", "any"),
    "music": ("music", "any"),
    "game": ("game", "any"),
    "event": ("event", "any"),
    "plant": ("plant", "physical", "any"),
    "abstract": ("abstract", "any"),
    "weather": ("weather", "any"),
    "body": ("body", "physical", "any"),
    "group": ("group", "any"),
}

#: The corpus topics, in a fixed order (documents keep to one topic).
TOPICS: tuple[str, ...] = (
    "food",
    "city",
    "animals",
    "nature",
    "school",
    "sports",
    "music",
    "home",
    "work",
    "health",
    "travel",
    "tech",
)


@dataclass(frozen=True)
class Noun:
    """A common noun: ``plural`` is None for mass nouns (*bread*, *traffic*)."""

    lemma: str
    plural: str | None
    cls: str
    topic: str
    gender: str | None = None  # "m" / "f" for gendered people (*mother*), else None
    sense: str | None = None  # e.g. "traffic" for jam=traffic; None if the word has one sense
    tags: tuple[str, ...] = ()

    @property
    def countable(self) -> bool:
        return self.plural is not None


@dataclass(frozen=True)
class Frame:
    """One argument frame of a verb.

    ``kind``: ``"I"`` intransitive, ``"T"`` transitive, ``"P"`` prepositional (verb + ``prep`` +
    object), ``"C"`` that-clause complement. ``subj`` / ``obj`` are alternative noun tags.
    """

    kind: str
    subj: tuple[str, ...]
    obj: tuple[str, ...] = ()
    prep: str | None = None


@dataclass(frozen=True)
class Verb:
    lemma: str
    s3: str  # 3rd person singular present: "eats"
    past: str  # "ate"
    participle: str  # "eaten"
    gerund: str  # "eating"
    topic: str  # "general" or one of TOPICS
    frames: tuple[Frame, ...]


def _parse_frame(text: str) -> Frame:
    kind, _, spec = text.partition(":")
    if kind not in ("I", "T", "P", "C"):
        raise ValueError(f"unknown verb frame kind {kind!r} in {text!r}")
    parts = spec.split(">")
    subj = tuple(parts[0].split("|"))
    if kind in ("I", "C"):
        return Frame(kind, subj)
    if kind == "T":
        return Frame(kind, subj, tuple(parts[1].split("|")))
    return Frame(kind, subj, tuple(parts[2].split("|")), parts[1])


def _rows(name: str) -> list[list[str]]:
    text = resources.files("course_lib.data").joinpath("lexicon", name).read_text(encoding="utf-8")
    return [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]


@dataclass
class Lexicon:
    """All word lists plus the indexes the grammar needs (built once, in file order)."""

    nouns: list[Noun]
    verbs: list[Verb]
    adjectives: dict[str, tuple[str, ...]]  # adjective -> noun tags it fits
    male_names: list[str]
    female_names: list[str]
    surnames: list[str]
    characters: list[str]  # fixed multi-token names: "Harry Potter", "Peter Pan"
    places: list[tuple[str, str]]  # (city, country), e.g. ("New York", "the United States")
    # indexes (filled in __post_init__)
    nouns_by_tag: dict[str, list[Noun]] = field(default_factory=dict, repr=False)
    nouns_by_topic_tag: dict[tuple[str, str], list[Noun]] = field(default_factory=dict, repr=False)
    adjectives_by_tag: dict[str, list[str]] = field(default_factory=dict, repr=False)
    senses: dict[str, list[Noun]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for noun in self.nouns:
            for tag in noun.tags:
                self.nouns_by_tag.setdefault(tag, []).append(noun)
                self.nouns_by_topic_tag.setdefault((noun.topic, tag), []).append(noun)
        for adj, tags in self.adjectives.items():
            for tag in tags:
                self.adjectives_by_tag.setdefault(tag, []).append(adj)
        for noun in self.nouns:
            if noun.sense is not None:
                self.senses.setdefault(noun.lemma, []).append(noun)

    def words(self) -> list[str]:
        """Every distinct word form (nouns, plurals, verb forms, adjectives, name tokens), sorted."""
        out: set[str] = set()
        for n in self.nouns:
            out.add(n.lemma)
            if n.plural:
                out.add(n.plural)
        for v in self.verbs:
            out.update((v.lemma, v.s3, v.past, v.participle, v.gerund))
        out.update(self.adjectives)
        for name in self.male_names + self.female_names + self.surnames + self.characters:
            out.update(name.split())
        for city, country in self.places:
            out.update(city.split())
            out.update(country.split())
        return sorted(out)

    def summary(self) -> dict[str, int]:
        """Counts of each kind of entry (for the book's tables)."""
        return {
            "noun entries": len(self.nouns),
            "noun lemmas": len({n.lemma for n in self.nouns}),
            "verbs": len({v.lemma for v in self.verbs}),
            "adjectives": len(self.adjectives),
            "first names": len(self.male_names) + len(self.female_names),
            "surnames": len(self.surnames),
            "multi-token characters": len(self.characters),
            "cities": len(self.places),
            "ambiguous nouns": len(self.senses),
            "word forms": len(self.words()),
        }


@functools.lru_cache(maxsize=1)
def load_lexicon() -> Lexicon:
    """Read the word lists shipped with course_lib (cached: call it freely)."""
    nouns = []
    for lemma, plural, cls, topic, gender, sense in _rows("nouns.tsv"):
        if cls not in CLASS_TAGS:
            raise ValueError(f"nouns.tsv: unknown class {cls!r} for {lemma!r}")
        if topic not in TOPICS:
            raise ValueError(f"nouns.tsv: unknown topic {topic!r} for {lemma!r}")
        nouns.append(
            Noun(
                lemma=lemma,
                plural=None if plural == "-" else plural,
                cls=cls,
                topic=topic,
                gender=None if gender == "-" else gender,
                sense=None if sense == "-" else sense,
                tags=CLASS_TAGS[cls],
            )
        )
    verbs = [
        Verb(lemma, s3, past, part, ger, topic, tuple(_parse_frame(f) for f in frames.split()))
        for lemma, s3, past, part, ger, topic, frames in _rows("verbs.tsv")
    ]
    adjectives = {adj: tuple(tags.split(",")) for adj, tags in _rows("adjectives.tsv")}
    names: dict[str, list[str]] = {"m": [], "f": [], "surname": [], "character": []}
    for kind, name in _rows("names.tsv"):
        names[kind].append(name)
    places = [(city, country) for city, country in _rows("places.tsv")]
    return Lexicon(
        nouns=nouns,
        verbs=verbs,
        adjectives=adjectives,
        male_names=names["m"],
        female_names=names["f"],
        surnames=names["surname"],
        characters=names["character"],
        places=places,
    )
