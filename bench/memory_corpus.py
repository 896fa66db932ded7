"""A long multi-session, multi-surface history with planted facts and questions whose evidence is known.

`generate(seed, people, messages_per_person, days)` is deterministic per seed. Each person writes in one language
(English or Spanish; some mix in the other one, session by session), on two or three of telegram, whatsapp and
web, in sessions (episodes: runs of messages with no gap over an hour; web sessions are conversations of their
own) spread over `days`, mostly everyday chatter (bench/memory_filler.py). Planted in it (bench/memory_facts.py):
simple facts, facts that change later, dated events and things mentioned across sessions. Questions, each with
the external ids of its evidence messages, are of the kinds

  lexical     shares a content word with its evidence
  paraphrase  shares no content word with its evidence (not even a word one is a prefix of: see `overlap`)
  when        asks when something happened; the evidence is the message whose date answers it
  list        answers spread over 3 sessions; recall is the share of them found
  update      the newest value of a fact that changed: the evidence is the newer message, not the older one
  previous    the value it replaced: the evidence is the older message

and are asked `now`: six hours after the last message of the whole history.
"""

from __future__ import annotations

import random
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bench.memory_facts import LIST, SIMPLE, UPDATE, WHEN, Family
from bench.memory_filler import assistant_line, contract, user_line
from kernel import tokens
from memory.search_terms import search_terms
from memory.store import ImportRow

KINDS = ("lexical", "paraphrase", "when", "list", "update", "previous")
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
#: Question words and auxiliaries that memory/search_terms.py still searches but that carry no content.
EXTRA_STOPWORDS = frozenset(
    "como que cual cuales cuando donde quien estoy estas esta he ha has hemos han did does do have am been".split())


@dataclass(frozen=True, slots=True)
class Person:
    handle: str
    lang: str
    mix: str | None  # the other language, written in ~30% of sessions
    surfaces: tuple[tuple[str, float], ...]


PEOPLE = (  # English and Spanish alternate: any two people hold both languages
    Person("alice", "en", None, (("telegram", 0.6), ("web", 0.4))),
    Person("carmen", "es", None, (("whatsapp", 0.8), ("web", 0.2))),
    Person("ben", "en", None, (("whatsapp", 0.7), ("web", 0.2), ("telegram", 0.1))),
    Person("diego", "es", None, (("telegram", 0.5), ("whatsapp", 0.3), ("web", 0.2))),
    Person("claire", "en", None, (("web", 0.5), ("telegram", 0.5))),
    Person("elena", "es", None, (("web", 0.6), ("whatsapp", 0.4))),
    Person("dylan", "en", "es", (("whatsapp", 0.5), ("telegram", 0.3), ("web", 0.2))),
    Person("fran", "es", "en", (("telegram", 0.6), ("web", 0.4))),
)


@dataclass(frozen=True, slots=True)
class Message:
    external_id: str
    user: str
    surface: str
    role: str
    content: str
    created_at: datetime
    conversation: str | None  # web: the conversation (one per session); telegram/whatsapp: the singleton

    def import_row(self) -> ImportRow:
        return ImportRow(user=self.user, surface=self.surface, role=self.role, content=self.content,
                         created_at=self.created_at, token_count=tokens.count(self.content),
                         external_id=self.external_id, conversation=self.conversation)


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    user: str
    lang: str
    kind: str
    text: str
    evidence: tuple[str, ...]  # external ids


@dataclass(slots=True)
class Corpus:
    seed: int
    people: list[Person]
    messages: list[Message]
    questions: list[Question]
    now: datetime

    def by_user(self, handle: str) -> list[Message]:
        return [m for m in self.messages if m.user == handle]


@dataclass(slots=True)
class _Session:
    surface: str
    lang: str
    turns: list[tuple[str, str, str | None]] = field(default_factory=list)  # (role, text, tag of planted)


def fold(word: str) -> str:
    """Lowercase without diacritics, as FTS5's `remove_diacritics 2` compares words."""
    return "".join(c for c in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(c))


def content_words(text: str) -> set[str]:
    """The words of `text` a search would use (memory/search_terms.py), folded, without EXTRA_STOPWORDS."""
    return {w for w in (fold(t) for t in search_terms(text, max_terms=10**6)) if w not in EXTRA_STOPWORDS}


def _collide(a: str, b: str) -> bool:
    short, long_ = sorted((a, b), key=len)
    return a == b or (len(short) >= 3 and long_.startswith(short)) or (len(short) >= 5 and a[:5] == b[:5])


def overlap(question: str, evidence: str) -> set[str]:
    """The question's content words that meet one of the evidence's: the same word, one a prefix of the other
    (3+ letters), or five letters in common at the start (what a stemmer would join: hike / hiking)."""
    ev = content_words(evidence)
    return {w for w in content_words(question) if any(_collide(w, e) for e in ev)}


def _fmt(template: str, value: str, old: str = "") -> str:
    parts = value.split("|")
    text = template.format(v=value.replace("|", " "), v0=parts[0], v1=parts[-1], old=old.replace("|", " "))
    return contract(text)


def generate(seed: int = 11, people: int = 8, messages_per_person: int = 1500, days: int = 180) -> Corpus:
    """The whole corpus: `people` of PEOPLE (cycled, with numbered handles past 8), about
    `messages_per_person` messages each over `days`, and their questions."""
    persons = [p if k < len(PEOPLE) else Person(f"{p.handle}{k // len(PEOPLE)}", p.lang, p.mix, p.surfaces)
               for k in range(people) for p in [PEOPLE[k % len(PEOPLE)]]]
    messages: list[Message] = []
    questions: list[Question] = []
    for person in persons:
        msgs, qs = _person(person, random.Random(f"{seed}:{person.handle}"), messages_per_person, days)
        messages += msgs
        questions += qs
    now = max(m.created_at for m in messages) + timedelta(hours=6)
    return Corpus(seed, persons, messages, questions, now)


def _person(p: Person, rng: random.Random, n: int, days: int) -> tuple[list[Message], list[Question]]:
    sessions: list[_Session] = []
    count = 0
    surfaces, weights = zip(*p.surfaces, strict=True)
    while count < n:
        lang = p.mix if p.mix is not None and rng.random() < 0.3 else p.lang
        assert lang is not None
        s = _Session(rng.choices(surfaces, weights)[0], lang)
        for _ in range(rng.randint(1, 6)):
            s.turns += [("user", user_line(lang, rng), None), ("assistant", assistant_line(lang, rng), None)]
        sessions.append(s)
        count += len(s.turns)
    plans, questions = _plans(p, rng)
    used: set[int] = set()
    for lo, hi, text, reply, tag in plans:
        first, last = int(lo * len(sessions)), max(int(lo * len(sessions)), int(hi * len(sessions)) - 1)
        free = [i for i in range(first, last + 1) if i not in used] or list(range(first, last + 1))
        i = rng.choice(free)
        used.add(i)
        at = 2 * rng.randint(0, len(sessions[i].turns) // 2)
        sessions[i].turns[at:at] = [("user", text, tag), ("assistant", reply, None)]
    messages: list[Message] = []
    ids: dict[str, str] = {}
    mean_gap = max(2 * 3600.0, days * 86400 / len(sessions))
    t = START + timedelta(seconds=rng.uniform(0, 86400))
    for k, s in enumerate(sessions):
        conversation = f"{p.handle}-web-{k}" if s.surface == "web" else None
        for role, content, planted in s.turns:
            ext = f"{p.handle}-{len(messages):06d}"
            messages.append(Message(ext, p.handle, s.surface, role, content, t, conversation))
            if planted is not None:
                ids[planted] = ext
            t += timedelta(seconds=rng.uniform(15, 240))
        t += timedelta(seconds=3700 + rng.expovariate(1 / (mean_gap - 3700)))  # over an hour: a new episode
    return messages, [Question(q.id, q.user, q.lang, q.kind, q.text, tuple(ids[e] for e in q.evidence))
                      for q in questions]


def _reply(spec: dict[str, object], lang: str, rng: random.Random) -> str:
    echo = spec["echo"]
    assert isinstance(echo, list)
    return str(rng.choice(echo)) if rng.random() < 0.5 else assistant_line(lang, rng)


def _plans(p: Person, rng: random.Random) -> tuple[list[tuple[float, float, str, str, str]], list[Question]]:
    """The planted messages (session window as a share of the history, text, reply, tag) and the questions,
    whose evidence holds tags (replaced by external ids once the messages have them)."""
    lang = p.lang
    plans: list[tuple[float, float, str, str, str]] = []
    qs: list[Question] = []

    def ask(family: Family, kind: str, text: str, tags: list[str]) -> None:
        qs.append(Question(f"{p.handle}:{family['name']}:{kind}", p.handle, lang, kind, text, tuple(tags)))

    for fam in rng.sample(SIMPLE, 4):
        spec = fam[lang]
        value = rng.choice(spec["v"])
        tag = f"{fam['name']}"
        plans.append((0.0, 0.9, _fmt(rng.choice(spec["say"]), value), _reply(spec, lang, rng), tag))
        ask(fam, "lexical", _fmt(spec["lexical"], value), [tag])
        ask(fam, "paraphrase", _fmt(spec["paraphrase"], value), [tag])
    for fam in UPDATE:
        spec = fam[lang]
        old, new = rng.sample(spec["v"], 2)
        plans.append((0.05, 0.45, _fmt(rng.choice(spec["say"]), old), _reply(spec, lang, rng), f"{fam['name']}-0"))
        plans.append((0.55, 0.95, _fmt(rng.choice(spec["update"]), new, old), _reply(spec, lang, rng),
                      f"{fam['name']}-1"))
        ask(fam, "update", spec["update_q"], [f"{fam['name']}-1"])
        ask(fam, "previous", spec["previous_q"], [f"{fam['name']}-0"])
    for fam in rng.sample(WHEN, 3):
        spec = fam[lang]
        value = rng.choice(spec["v"])
        plans.append((0.0, 0.9, _fmt(spec["say"][0], value), _reply(spec, lang, rng), fam["name"]))
        ask(fam, "when", _fmt(rng.choice(spec["when_q"]), value), [fam["name"]])
    for fam in rng.sample(LIST, 2):
        spec = fam[lang]
        tags = []
        for i, value in enumerate(rng.sample(spec["v"], 3)):
            tag = f"{fam['name']}-{i}"
            tags.append(tag)
            plans.append((i * 0.3, (i + 1) * 0.3, _fmt(rng.choice(spec["say"]), value), _reply(spec, lang, rng), tag))
        ask(fam, "list", spec["list_q"], tags)
    return plans, qs


def template_problems() -> list[str]:
    """Every (question, statement) pair the families can generate that breaks its kind's promise: a paraphrase
    that meets a word of its evidence, a lexical question that meets none. Empty when the families are sound."""
    problems = []
    for fam in SIMPLE:
        for lang in ("en", "es"):
            spec = fam[lang]
            for value in spec["v"]:
                for say in spec["say"]:
                    evidence = _fmt(say, value)
                    shared = overlap(_fmt(spec["paraphrase"], value), evidence)
                    if shared:
                        problems.append(f"{fam['name']}/{lang} paraphrase meets {sorted(shared)} in {evidence!r}")
                    if not overlap(_fmt(spec["lexical"], value), evidence):
                        problems.append(f"{fam['name']}/{lang} lexical shares nothing with {evidence!r}")
    return problems
