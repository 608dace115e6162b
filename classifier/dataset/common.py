"""Pieces shared by the prompt templates: class-neutral dressing, pasting styles, word pools.

Dressing (greetings, politeness, sign-offs, casing) is drawn the same way for every class, so it
carries no label signal; only the ask and the pasted material differ between classes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from classifier.dataset.corpus import CodeSnippet, Corpus

Prompt = dict  # {"text": str} or {"messages": [...]} (+ optional "response_format")


@dataclass(frozen=True)
class Template:
    id: str
    label: str
    make: Callable[[random.Random, Corpus], Prompt]
    count: int = 70
    source: str = "template"
    tags: tuple[str, ...] = field(default_factory=tuple)


OPENERS = (
    "", "", "", "", "", "Hi! ", "Hey, ", "Hello. ", "Quick question: ", "Please help: ", "Could you help me? ",
    "I'm stuck. ", "Okay so ", "Good morning! ", "hi ", "Urgent: ", "For a project at work: ", "Need help. ",
)  # fmt: skip
CLOSERS = (
    "", "", "", "", "", " Thanks!", " Thank you.", " thx", " Thanks in advance.", " Cheers.", " Please.",
    " Be concise.", " Keep it short.", " Take your time.", " Appreciate it!", " :)",
)  # fmt: skip

CODE_LANGS = (
    "Python", "Python", "Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C", "C++", "C#", "Ruby",
    "PHP", "Kotlin", "Swift", "Bash", "Haskell", "Scala", "Lua", "R", "Julia", "Perl", "Elixir", "Dart",
)  # fmt: skip

FENCE_TAGS = {
    "Python": "python", "Go": "go", "Ruby": "ruby", "Perl": "perl", "JavaScript": "js", "TypeScript": "ts",
    "C": "c", "C++": "cpp", "Rust": "rust", "Java": "java", "Bash": "bash", "HTML": "html", "CSS": "css",
}  # fmt: skip


# Indices of the ask phrasings picked while one prompt is made. build_dataset reads them to group
# near-duplicates: fills of one template that share their ask phrasing stay on one side of the split.
_picked_phrasings: list[int] = []


def phrase(rng: random.Random, options: tuple[str, ...]) -> str:
    """Pick one phrasing of the ask, remembering which (see take_phrasing_key)."""
    index = rng.randrange(len(options))
    _picked_phrasings.append(index)
    return options[index]


def take_phrasing_key() -> str:
    key = ".".join(str(i) for i in _picked_phrasings)
    _picked_phrasings.clear()
    return key


def howto_voices(task: str) -> tuple[str, ...]:
    """How people ask how to do something: shared by the programming and the everyday how-to
    templates, so that the phrasing is no cue to either class and the task decides."""
    return (f"How do I {task}?", f"How can I {task}?", f"What's the best way to {task}?", f"Show me how to {task}.",
            f"how to {task}", f"What is the fastest way to {task}?")


def dress(rng: random.Random, core: str) -> str:
    """Wrap the ask in class-neutral conversational noise."""
    text = rng.choice(OPENERS) + core + rng.choice(CLOSERS)
    roll = rng.random()
    if roll < 0.12:
        text = text.lower()
    elif roll < 0.17:
        text = text.rstrip(".!?")
    return text.strip()


def paste(rng: random.Random, material: str, fence_tag: str = "") -> str:
    """Pasted material as users paste it: fenced (with or without a tag), quoted, or raw."""
    style = rng.random()
    if style < 0.45:
        return f"```{fence_tag if rng.random() < 0.7 else ''}\n{material}\n```"
    if style < 0.55:
        return '"""\n' + material + '\n"""'
    if style < 0.62:
        return "---\n" + material + "\n---"
    return material


def around(rng: random.Random, ask: str, material: str, fence_tag: str = "") -> str:
    """Put the ask before, after, or on both sides of the pasted material."""
    pasted = paste(rng, material, fence_tag)
    roll = rng.random()
    if roll < 0.55:
        return f"{ask}\n\n{pasted}"
    if roll < 0.85:
        return f"{pasted}\n\n{ask}"
    return f"{ask}\n\n{pasted}\n\n{rng.choice(('Thanks.', 'See above.', 'That is all.', 'Go.', 'Please.'))}"


def code_with_lang(rng: random.Random, corpus: Corpus, languages: tuple[str, ...] = ()) -> CodeSnippet:
    pool = corpus.code if not languages else [c for c in corpus.code if c.language in languages]
    return rng.choice(pool)


def clip(rng: random.Random, text: str, low: int = 200, high: int = 1400) -> str:
    limit = rng.randint(low, high)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut[: cut.rfind("\n")] if "\n" in cut[limit // 2 :] else cut


def lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def describe_as_clause(description: str) -> str:
    """'Return the size of x.' -> 'returns the size of x' (for 'Write a function that ...')."""
    text = description.strip().rstrip(".")
    words = text.split(" ", 1)
    verb = words[0]
    if verb.lower() in ("return", "get", "create", "make", "convert", "check", "compute", "build", "parse",
                        "read", "write", "add", "remove", "find", "set", "test", "handle", "load", "print",
                        "format", "split", "join", "open", "close", "send", "update", "generate", "validate"):
        verb = verb.lower()
        verb = verb + ("es" if verb.endswith(("s", "sh", "ch", "x")) else "s")
        return verb + (" " + words[1] if len(words) > 1 else "")
    return lower_first(text)


def everyday_topics() -> tuple[str, ...]:
    return EVERYDAY_TOPICS


EVERYDAY_TOPICS = (
    "the history of tea", "why sleep matters", "remote work", "the printing press", "urban beekeeping",
    "learning a second language", "climate change and farming", "the ethics of self-driving cars",
    "minimalism", "the Roman aqueducts", "how vaccines work", "social media and teenagers", "the Silk Road",
    "public libraries", "electric bikes", "the French Revolution", "open source software", "coral reefs",
    "procrastination", "the invention of the telephone", "jazz in the 1920s", "volunteering", "space tourism",
    "the four-day work week", "plastic recycling", "the importance of failure", "board games", "coffee culture",
    "the moon landing", "mental health at work", "fast fashion", "nuclear energy", "the Great Fire of London",
    "homeschooling", "video games as art", "the human microbiome", "rainforests", "mentorship", "inflation",
    "the Olympic Games", "artificial intelligence in medicine", "the gig economy", "desert ecosystems",
    "ancient Egyptian medicine", "the history of chess", "city parks", "the value of boredom", "tiny houses",
    "migration of birds", "the Renaissance", "water scarcity", "digital privacy", "handwriting in schools",
    "the first computers", "volcanoes", "sourdough baking", "public transport", "the placebo effect",
    "wildfires", "the Cold War", "friendship", "penguins", "the history of the internet", "stoicism",
)  # fmt: skip
