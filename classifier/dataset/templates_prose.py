"""Templates whose expected reply is prose (explanation, summary, essay, letter, story, advice)."""

from __future__ import annotations

import random

from classifier.dataset.common import (
    phrase,
    EVERYDAY_TOPICS, FENCE_TAGS, Template, around, clip, code_with_lang, dress, howto_voices,
)  # fmt: skip
from classifier.dataset.corpus import Corpus, table_csv
from classifier.dataset.templates_code import SYSTEM_GENERIC

LANGUAGES = ("French", "German", "Spanish", "Italian", "Portuguese", "Dutch", "Japanese", "Polish")


def _topic(rng: random.Random, corpus: Corpus) -> str:
    return rng.choice(corpus.topics) if rng.random() < 0.5 else rng.choice(EVERYDAY_TOPICS)


def _summarise(rng: random.Random, corpus: Corpus) -> dict:
    passage = rng.choice(corpus.tech_prose if rng.random() < 0.7 else corpus.literary_prose)
    ask = phrase(rng, (
        "Summarise this paragraph in two sentences.", "TL;DR?", "Give me a one-line summary of this.",
        "Can you summarize the following for a non-expert?", "What is the main point of this text?",
        "Condense this into a short paragraph.", "Summarize:", "Explain what this passage is saying.",
        "Please write a brief abstract of the text below.", "What's this about, in plain words?",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, passage))}


def _explain_code(rng: random.Random, corpus: Corpus) -> dict:
    """Pasted code, but the ask is for an explanation: the reply is prose."""
    snippet = code_with_lang(rng, corpus)
    ask = phrase(rng, (
        "Explain what this code does.", "Can you walk me through this function step by step?",
        "What does this do? Explain in plain English, no code.", "Why would someone write it this way?",
        "Describe the purpose of this function in a paragraph.", "Is this code thread-safe? Explain your reasoning.",
        "What is the time complexity of this and why?", "I don't understand this snippet. What's going on?",
        "Write a short explanation of this for the docs (prose, not code).", "Review this code and tell me in words what could go wrong.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, clip(rng, snippet.code), FENCE_TAGS.get(snippet.language, "")))}


def _essay(rng: random.Random, corpus: Corpus) -> dict:
    topic = _topic(rng, corpus)
    ask = phrase(rng, (
        f"Write a short essay about {topic}.", f"Write a 500-word blog post on {topic}.",
        f"Compose an opinion piece arguing for or against {topic}.", f"Write an introduction paragraph for a report on {topic}.",
        f"Draft a persuasive essay on {topic} for a high-school audience.", f"Write a newsletter article about {topic}.",
        f"I need a speech of about three minutes on {topic}.", f"Write the conclusion of my thesis chapter on {topic}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _explain_concept(rng: random.Random, corpus: Corpus) -> dict:
    topic = _topic(rng, corpus)
    ask = phrase(rng, (
        f"Explain {topic} like I'm five.", f"What is {topic}?", f"Can you explain {topic} to a beginner?",
        f"Why does {topic} matter?", f"Give me an overview of {topic}.", f"How would you describe {topic} to a manager?",
        f"What are the pros and cons of {topic}?", f"I keep hearing about {topic}. What is it, briefly?",
        f"{topic}: what should I know?", f"Tell me about {topic}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _story_poem(rng: random.Random, corpus: Corpus) -> dict:
    topic = rng.choice(EVERYDAY_TOPICS)
    ask = phrase(rng, (
        f"Write a short story about {topic}.", f"Write a poem about {topic}.", f"Write a haiku about {topic}.",
        f"Tell me a bedtime story involving {topic}.", f"Write a limerick on {topic}.",
        f"Write a sonnet in the style of Shakespeare about {topic}.", f"Write the opening paragraph of a mystery novel set around {topic}.",
        f"Write a funny anecdote about {topic}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _email_letter(rng: random.Random, corpus: Corpus) -> dict:
    who = rng.choice(("my landlord", "my manager", "a customer", "the school", "a recruiter", "my team", "my neighbour", "a supplier"))
    why = rng.choice((
        "asking for a deadline extension", "about a broken heater", "declining a job offer politely",
        "apologising for a late delivery", "announcing a product launch", "requesting a refund",
        "thanking them for their help", "asking for a reference letter", "explaining a billing mistake",
        "inviting them to a workshop", "following up on an interview",
    ))  # fmt: skip
    ask = phrase(rng, (
        f"Write an email to {who} {why}.", f"Draft a polite letter to {who} {why}.", f"Help me write a message to {who} {why}.",
        f"Can you write a short, friendly note to {who} {why}?", f"Compose a formal email to {who} {why}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _rewrite_text(rng: random.Random, corpus: Corpus) -> dict:
    passage = clip(rng, rng.choice(corpus.tech_prose + corpus.literary_prose), 200, 900)
    ask = phrase(rng, (
        "Proofread this and fix the grammar.", "Make this more formal.", "Rewrite this to be friendlier.",
        "Simplify this text for a 10-year-old.", "Rephrase this paragraph so it flows better.",
        "Make this shorter without losing meaning.", "Rewrite this in modern English.", "Paraphrase this.",
        "Improve the wording of this paragraph.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, passage))}


def _translate_text(rng: random.Random, corpus: Corpus) -> dict:
    passage = clip(rng, rng.choice(corpus.tech_prose + corpus.quotes), 80, 700)
    language = rng.choice(LANGUAGES)
    ask = phrase(rng, (f"Translate this into {language}.", f"Can you put this in {language}?", f"{language} translation please:",
                      f"How would you say this in {language}?"))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, passage))}


def _describe_data(rng: random.Random, corpus: Corpus) -> dict:
    """Pasted data, but the ask is for a written interpretation: the reply is prose."""
    if rng.random() < 0.6:
        table = rng.choice(corpus.tables)
        material, tag = table_csv(table, rng.randint(4, 12)), "csv"
    else:
        material, tag = clip(rng, rng.choice(corpus.json_docs), 150, 900), "json"
    ask = phrase(rng, (
        "What trends do you see in this data? Describe them in a paragraph.", "Interpret these numbers for me.",
        "Write a short narrative summary of this dataset for a report.", "What story does this data tell?",
        "Explain what this file contains to a non-technical colleague.", "Is there anything surprising in this data? Discuss.",
        "What can we conclude from this? Answer in prose.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, material, tag))}


def _explain_query_or_config(rng: random.Random, corpus: Corpus) -> dict:
    """Pasted SQL/YAML/XML with an ask for an explanation: prose, not structured output."""
    kind = rng.random()
    if kind < 0.4:
        material, tag, what = clip(rng, rng.choice(corpus.sql), 60, 800), "sql", "query"
    elif kind < 0.75:
        material, tag, what = rng.choice(corpus.yaml_docs), "yaml", "playbook"
    else:
        material, tag, what = rng.choice(corpus.xml_docs), "xml", "XML file"
    ask = phrase(rng, (
        f"Explain what this {what} does.", f"Can you describe this {what} in plain English?",
        f"What is the purpose of this {what}? Explain briefly.", f"Walk me through this {what} line by line in words.",
        f"Why might this {what} be slow or wrong? Explain.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, material, tag))}


def _literary_question(rng: random.Random, corpus: Corpus) -> dict:
    passage = rng.choice(corpus.literary_prose)
    ask = phrase(rng, (
        "What is the speaker feeling in this passage?", "Analyse the imagery in this passage.",
        "Who is speaking here and what do they want?", "Write a short critical commentary on this extract.",
        "What themes does this passage touch on?", "Explain the meaning of these lines.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, passage))}


def _quote_meaning(rng: random.Random, corpus: Corpus) -> dict:
    quote = rng.choice(corpus.quotes)
    ask = phrase(rng, ("What does this mean?", "Explain this joke.", "Is this quote true? Discuss.", "Who might have said this, and why?",
                      "Write a reflection on this saying.", "Why is this funny?"))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, quote))}


def _advice(rng: random.Random, corpus: Corpus) -> dict:
    situation = rng.choice((
        "I just got promoted and have to manage my former peers", "I can't focus when working from home",
        "my cat keeps waking me up at 5am", "I want to switch careers into data science", "my startup is running out of money",
        "I have a job offer abroad but my family is here", "my code reviews keep turning into arguments",
        "I'm nervous about a presentation next week", "I want to start running but keep getting injured",
        "my team misses every deadline", "I'm choosing between two universities",
    ))  # fmt: skip
    ask = phrase(rng, (f"{situation}. What should I do?", f"Any advice? {situation}.", f"{situation}, how do I handle this?",
                      f"Help me think this through: {situation}."))  # fmt: skip
    return {"text": dress(rng, ask)}


def _tips_and_ideas(rng: random.Random, corpus: Corpus) -> dict:
    """Lists of tips or ideas are still running text (prose), not a data format."""
    topic = rng.choice(EVERYDAY_TOPICS)
    n = rng.choice((3, 5, 7, 10))
    ask = phrase(rng, (
        f"Give me {n} tips for getting into {topic}.", f"List {n} ideas for a blog about {topic}.",
        f"What are some good ways to learn about {topic}?", f"Brainstorm {n} names for a podcast on {topic}.",
        f"{n} reasons why {topic} matters?", f"Suggest a few discussion questions about {topic}.",
        f"What are the most common misconceptions about {topic}?", f"Give me a reading list on {topic} with a line on each book.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _math_question(rng: random.Random, corpus: Corpus) -> dict:
    """Arithmetic and word problems: the reply is worked reasoning in sentences."""
    a, b, c = rng.randint(2, 90), rng.randint(2, 40), rng.randint(2, 12)
    item = rng.choice(("apples", "tickets", "books", "litres of paint", "marbles", "hours of work", "bus fares"))
    ask = phrase(rng, (
        f"What is {a}% of {b * 10}?", f"Solve for x: {c}x + {a} = {a + c * b}", f"If I buy {c} {item} at ${b} each and pay with ${c * b + a}, how much change do I get?",
        f"A train travels {a * 3} km in {c} hours. What is its average speed? Show your reasoning.",
        f"Sam had {a + b} {item}. He gave away {b} and then bought {c} more. How many does he have now?",
        f"Is {a * c + 1} a prime number? Explain.", f"What's the probability of rolling a sum of {c % 11 + 2} with two dice?",
        f"Explain step by step how to compute {a} times {b} in my head.", f"How many minutes are there in {c} days?",
        f"Convert {a} degrees Celsius to Fahrenheit and explain the formula.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _compare(rng: random.Random, corpus: Corpus) -> dict:
    pair = rng.sample(corpus.topics, 2) if rng.random() < 0.5 else rng.sample(EVERYDAY_TOPICS, 2)
    ask = phrase(rng, (
        f"What is the difference between {pair[0]} and {pair[1]}?", f"Compare {pair[0]} with {pair[1]} in a few paragraphs.",
        f"Which matters more, {pair[0]} or {pair[1]}? Argue your case.", f"How are {pair[0]} and {pair[1]} related?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _followup_prose(rng: random.Random, corpus: Corpus) -> dict:
    """Multi-turn: earlier turns hold code or data, the last ask is for an explanation."""
    snippet = code_with_lang(rng, corpus)
    messages = [
        {"role": "user", "content": rng.choice(("Write a function for this:", "Here's my code:", "Can you review this?")) + "\n" + clip(rng, snippet.code, 150, 700)},
        {"role": "assistant", "content": clip(rng, rng.choice(corpus.code).code, 100, 500)},
        {"role": "user", "content": dress(rng, phrase(rng, (
            "Thanks. Now explain in plain words why that works.", "Why is this better than my version?",
            "What are the trade-offs here? No code, just explain.", "Can you summarise what changed and why?",
            "How would you explain this to a junior developer?", "ok but why",
        )))},
    ]  # fmt: skip
    if rng.random() < 0.4:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEM_GENERIC)})
    return {"messages": messages}


def _system_persona(rng: random.Random, corpus: Corpus) -> dict:
    system = phrase(rng, (
        "You are a patient history teacher.", "You are a writing coach who gives gentle feedback.",
        "You are a travel agent. Reply in a warm, conversational tone.", "You are a philosophy tutor.",
        "You are a customer-support agent for an online bookshop.", "You are a science communicator.",
    ))  # fmt: skip
    user = phrase(rng, (f"Tell me about {_topic(rng, corpus)}.", f"What do you think of {_topic(rng, corpus)}?",
                       f"I'm writing about {_topic(rng, corpus)}, where should I start?", "Can you give me feedback on my idea for a novel?"))  # fmt: skip
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def _multilingual_prose(rng: random.Random, corpus: Corpus) -> dict:
    topic = rng.choice(EVERYDAY_TOPICS)
    ask = phrase(rng, (
        f"Escribe un ensayo corto sobre {topic}.", f"Explique-moi {topic} simplement.", f"Schreibe einen kurzen Aufsatz über {topic}.",
        f"Raccontami una storia su {topic}.", f"Explique o que é {topic}.", f"请写一篇关于{topic}的短文。", f"{topic}について説明してください。",
        f"Расскажи мне о {topic}.", f"Napisz krótki esej o {topic}.", f"{topic}에 대해 설명해 주세요.", f"Resume este texto, por favor:\n\n{rng.choice(corpus.tech_prose)}",
        f"Fasse diesen Text zusammen:\n\n{rng.choice(corpus.tech_prose)}", f"Résume ce paragraphe :\n\n{rng.choice(corpus.tech_prose)}",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# Writing briefs: a document asked for with a numbered or bulleted list of requirements (audience,
# tone, length, sections). The list makes them look like data, but the reply is running text.
_DOCUMENTS = ("a report", "a proposal", "a lesson plan", "a speech", "a press release", "a product description",
              "a project summary", "a cover letter", "a blog post", "a policy memo", "a case study", "a newsletter")  # fmt: skip
_REQUIREMENTS = (
    "Use a formal tone.", "Aim for about {n} words.", "Write for {who}.", "Start with a short introduction.",
    "Cover the background, the main problem and possible solutions.", "End with a clear conclusion.",
    "Use headings for each section.", "Include two concrete examples.", "Avoid jargon.", "Keep paragraphs short.",
    "Mention the risks and how to reduce them.", "Use the first person.", "Add a call to action at the end.",
    "Cite at least one historical event.", "Do not use bullet points in the body.", "Keep it under {n} words.",
)  # fmt: skip
_REQUIREMENTS_ZH = ("语气正式、专业。", "字数不少于{n}字。", "面向{who_zh}。", "先简要介绍背景。", "分析主要问题并提出建议。",
                    "结尾给出明确结论。", "每一部分使用小标题。", "结合两个具体案例。", "语言通俗易懂。", "说明风险及应对措施。")  # fmt: skip
_DOCUMENTS_ZH = ("报告", "方案", "教案", "演讲稿", "新闻稿", "产品介绍", "项目总结", "求职信", "文章", "策划书")
_AUDIENCES = ("senior managers", "high-school students", "new employees", "investors", "parents", "a general audience")
_AUDIENCES_ZH = ("公司管理层", "中学生", "新员工", "投资人", "家长", "普通读者")


def _writing_brief(rng: random.Random, corpus: Corpus) -> dict:
    topic, n = rng.choice(EVERYDAY_TOPICS), rng.choice((300, 500, 800, 1000, 1500, 2000))
    marker = rng.choice(("{i}. ", "{i}) ", "- ", "* ", "({i}) "))
    if rng.random() < 0.3:
        picks = rng.sample(_REQUIREMENTS_ZH, rng.randint(3, 6))
        items = [p.format(n=n, who_zh=rng.choice(_AUDIENCES_ZH)) for p in picks]
        head = phrase(rng, (f"请帮我写一份关于“{topic}”的{rng.choice(_DOCUMENTS_ZH)}，要求如下：",
                            f"我需要一篇{rng.choice(_DOCUMENTS_ZH)}，主题是{topic}。具体要求：", f"请撰写{rng.choice(_DOCUMENTS_ZH)}（主题：{topic}）："))  # fmt: skip
    else:
        picks = rng.sample(_REQUIREMENTS, rng.randint(3, 7))
        items = [p.format(n=n, who=rng.choice(_AUDIENCES)) for p in picks]
        doc = rng.choice(_DOCUMENTS)
        head = phrase(rng, (f"Please write {doc} about {topic}. Requirements:", f"I need {doc} on {topic}. It should follow these points:",
                            f"Draft {doc} on {topic}.\nGuidelines:", f"Write {doc} ({topic}) that meets the following:"))  # fmt: skip
    lines = [marker.format(i=i + 1) + item for i, item in enumerate(items)]
    return {"text": dress(rng, head + "\n" + "\n".join(lines))}


# Questions about programming that want an answer in words: why a language is designed as it is,
# what the difference between two ideas is, where to learn or report something, which tool to
# pick. Paired with code/howto_plain so that "how do I <do something to data>" and "why / what /
# which / where ..." about the same vocabulary are told apart by the kind of question.
PROGRAMMING_PAIRS = (
    ("threads", "processes"), ("a compiler", "an interpreter"), ("static typing", "dynamic typing"),
    ("a library", "a framework"), ("an array", "a linked list"), ("concurrency", "parallelism"), ("TCP", "UDP"),
    ("the stack", "the heap"), ("SQL databases", "document stores"), ("unit tests", "integration tests"),
    ("git merge", "git rebase"), ("REST", "GraphQL"), ("inheritance", "composition"), ("a monolith", "microservices"),
)  # fmt: skip
PROGRAMMING_TOPICS = (
    "garbage collection", "a global interpreter lock", "tail-call optimisation", "closures", "operator overloading",
    "exception handling", "unicode support", "multiple inheritance", "a package registry", "memory management",
    "backward compatibility", "null references", "green threads", "type inference", "macros",
)  # fmt: skip
# "How do I ..." about a programmer's career or process, not about data: answered in words.
PROGRAMMER_CHORES = (
    "get started with a new programming language", "convince my team to adopt code reviews", "find a mentor as a junior developer",
    "prepare for a technical interview", "choose between two web frameworks", "become a better programmer",
    "keep up with new language releases", "start contributing to an open-source project", "pick a license for my library",
    "estimate how long a software project will take", "stay motivated while learning to code", "write a good bug report",
    "ask a good question on a programming forum", "decide whether to rewrite a legacy system",
)  # fmt: skip
LANG_NAMES = ("Python", "Perl", "Ruby", "Java", "C++", "Go", "Rust", "JavaScript", "PHP", "Haskell", "Lisp", "Tcl")


def _programming_question(rng: random.Random, corpus: Corpus) -> dict:
    lang, topic = rng.choice(LANG_NAMES), rng.choice(PROGRAMMING_TOPICS)
    first, second = rng.choice(PROGRAMMING_PAIRS)
    ask = phrase(rng, (
        f"What is the difference between {first} and {second}?", f"Why does {lang} handle {topic} the way it does?",
        f"How does {topic} work in {lang}, conceptually?", f"What are the pros and cons of {topic}?",
        f"Should I learn {lang} or {rng.choice(LANG_NAMES)} first?", f"Why would anyone choose {lang} today?",
        f"Does {lang} have {topic}? Why or why not?", f"When should I prefer {first} over {second}?",
        f"Give me a short history of {lang}.", f"What do people dislike about {lang}?",
        f"Is {topic} worth the complexity it adds to {lang}?", f"How would you explain {topic} to someone new to {lang}?",
        f"What trade-offs did the designers of {lang} make around {topic}?", f"Which is easier to maintain, {first} or {second}?",
        f"How do I {rng.choice(PROGRAMMER_CHORES)}?", f"How can I {rng.choice(PROGRAMMER_CHORES)}?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# How-to questions about a language's tools and the practice of programming — installing, learning,
# getting help, debugging and profiling in general, shipping, choosing libraries — answered in words
# (advice, where to look, which tool), as the FAQ label rule has it ("installing or building the
# language itself, making a stand-alone binary, debugging" are prose). The twin of
# `code/runtime_value`: the same voices, so the phrasing is no cue and the object decides. Written for
# this template.
TOOLING_TASKS = (
    "install the {lang} interpreter on an old laptop", "find good tutorials for {lang}",
    "get help when the {lang} documentation does not answer my question", "report a bug I found in the {lang} compiler",
    "track down why my {lang} program is slow", "debug a program that only crashes on a customer's machine",
    "ship my {lang} tool to people who don't have {lang} installed", "choose a GUI toolkit for a {lang} desktop app",
    "keep the dependencies of a {lang} project up to date", "set up a {lang} development environment on Windows",
    "learn {lang} when I already know {other}", "get my {lang} library noticed by other developers",
    "decide which {lang} web framework to use", "find out what changed in the latest {lang} release",
    "build {lang} itself from source on an unusual platform", "contribute a patch to the {lang} standard library",
    "approach testing a large {lang} project", "make my {lang} programs easier for others to read",
    "organise a large {lang} project into packages", "cut the build time of a big {lang} project",
    "avoid memory leaks in long-running {lang} services", "pick a good editor or IDE for {lang}",
    "get a {lang} job without a computer science degree", "find where the sources of the {lang} runtime live",
    "move a team from {other} to {lang}", "get commercial support for {lang}",
    "know whether {lang} is a good fit for embedded devices", "stay on top of security advisories for {lang} packages",
    "get faster at reading other people's {lang} projects", "find a {lang} library that does what I need",
)  # fmt: skip


def _tooling_question(rng: random.Random, corpus: Corpus) -> dict:
    lang, other = rng.sample(LANG_NAMES, 2)
    task = rng.choice(TOOLING_TASKS).format(lang=lang, other=other)
    ask = phrase(rng, (
        *howto_voices(task), f"Any advice on how to {task}?", f"Where do I start if I want to {task}?",
        f"I'm wondering how to {task}.", f"What should I do to {task}?", f"Can I {task} without paying anything?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# Math written in notation (equations, f(x), a_n, matrices, coordinates, limits, LaTeX): the reply is a
# worked solution in sentences and formulas, not a program. Written for the kinds of request that read
# as code to the model (symbols, brackets, underscores): a probe set of 30 math asks of my own had 4 such
# misses (a recurrence a_n, a matrix [[2, 1], [1, 2]], a circle's equation, a triangle's vertices);
# no prompt of any source or benchmark was used.
MATH_TAILS = ("", "", "", " Show your work.", " Explain each step.", " Give the answer with a short justification.",
              " Please show the steps.", " Just the final answer, with one line of reasoning.", " Prove your answer.")


def _math_notation(rng: random.Random, corpus: Corpus) -> dict:
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 20), rng.randint(2, 7)
    n, m = rng.randint(3, 12), rng.randint(2, 9)
    x1, y1, x2, y2, x3, y3 = (rng.randint(-6, 9) for _ in range(6))
    var = rng.choice(("x", "x", "t", "z"))
    ask = phrase(rng, (
        f"Solve {a}{var}^2 - {b}{var} + {c} = 0.", f"Solve the system {a}x + y = {b}, x - {d}y = {c}.",
        f"Factor {var}^2 - {b + d}{var} + {b * d}.", f"Simplify ({var}^2 - {d * d})/({var} + {d}).",
        f"Find all real {var} such that |{a}{var} - {c}| < {b}.", f"If f(x) = {a}x^2 + {c}, what is f(f({d}))?",
        f"Find the inverse of f(x) = ({a}x + {c})/(x - {d}).", f"Differentiate f(x) = x^{d} * ln(x).",
        f"What is d/dx of sin({a}x) * e^({d}x)?", f"Evaluate the integral of x^{d} e^x dx from 0 to 1.",
        f"Compute \\int_0^{{\\pi}} \\sin^{d}(x)\\,dx.", f"Find lim_{{x->0}} (1 - cos({a}x))/x^2.",
        f"Find the maximum of f(x) = -{a}x^2 + {b}x + {c} on [0, {n}].",
        f"Let a_1 = {a} and a_n = {d}a_{{n-1}} - {c}. Find a_{n}.", f"Find a closed form for the sum of k^{m % 3 + 1} for k = 1..n.",
        f"What is the next term of {a}, {a + b}, {a + 3 * b}, {a + 6 * b}, ...?", f"Find the determinant of [[{a}, {b}], [{c}, {d}]].",
        f"Compute the eigenvalues of the matrix [[{a}, {d}], [{d}, {a}]].", f"Find A^{{-1}} for A = [[{a}, {b}], [{c}, {d + a}]].",
        f"Are the vectors ({x1}, {y1}, {a}), ({x2}, {y2}, {b}) and ({x3}, {y3}, {c}) linearly independent?",
        f"Find the area of the triangle with vertices ({x1}, {y1}), ({x2}, {y2}) and ({x3}, {y3}).",
        f"A circle has equation x^2 + y^2 - {2 * a}x + {2 * d}y = {c}. Find its centre and radius.",
        f"Find the distance between ({x1}, {y1}) and ({x2}, {y2}), and the midpoint.",
        f"What is the slope of the line through ({x1}, {y1}) and ({x2}, {y2 + 10})?", f"Find gcd({a * 12}, {d * 18}) and lcm of the same.",
        f"What is {d}^{{{n * 100 + c}}} mod {b + 1}?", f"Show that n^3 - n is divisible by 6 for every integer n.",
        f"Prove by induction that 1 + 2 + ... + n = n(n + 1)/2.", f"Prove that sqrt({rng.choice((2, 3, 5, 7))}) is irrational.",
        f"P(A) = 0.{a}, P(B) = 0.{d}, P(A ∩ B) = 0.0{a}. Find P(A ∪ B) and P(A | B).",
        f"X ~ Binomial({n}, 0.{d}). Find P(X = {m % n}) and E[X].", f"Let X ~ N(0, 1). What is P(-{a % 3 + 1} < X < {a % 3 + 1})?",
        f"Solve the recurrence T(n) = {d}T(n/2) + n.", f"For which real k does k{var}^2 + {b}{var} + {c} = 0 have two real roots?",
        f"Compute $\\sum_{{k=1}}^{{{n}}} k^2$ and explain the formula you used.", f"Solve $\\frac{{{a}}}{{x}} + \\frac{{{d}}}{{x+1}} = 1$.",
    ))  # fmt: skip
    return {"text": dress(rng, ask + rng.choice(MATH_TAILS))}


# Word problems about shapes and measures: the nouns (length, width, radius, area, perimeter) and the
# imperative "Find its ..." are also a function spec's, but the reply is a worked answer in words
SHAPES = (
    ("rectangle", ("length", "width"), ("area", "perimeter", "diagonal")),
    ("rectangular garden", ("length", "width"), ("area", "perimeter", "fencing needed")),
    ("square", ("side",), ("area", "perimeter", "diagonal")),
    ("right triangle", ("leg", "hypotenuse"), ("area", "perimeter", "other leg")),
    ("triangle", ("base", "height"), ("area", "largest angle")),
    ("circle", ("radius", "diameter"), ("area", "circumference")),
    ("circular pond", ("radius", "diameter"), ("area", "circumference")),
    ("cylinder", ("radius", "height"), ("volume", "surface area")),
    ("cone", ("radius", "slant height"), ("volume", "height")),
    ("sphere", ("radius",), ("volume", "surface area")),
    ("box", ("length", "width", "height"), ("volume", "surface area")),
    ("trapezoid", ("height", "shorter base", "longer base"), ("area",)),
    ("regular hexagon", ("side",), ("perimeter", "area", "interior angle")),
    ("room", ("length", "width", "height"), ("floor area", "volume")),
)  # fmt: skip
UNITS = ("cm", "m", "mm", "inches", "feet", "km", "yards")


def _measure_problem(rng: random.Random, corpus: Corpus) -> dict:
    """Geometry and measurement word problems (no corpus material)."""
    shape, given, wanted = rng.choice(SHAPES)
    unit, target = rng.choice(UNITS), rng.choice(wanted)
    facts = " and ".join(f"{g} {rng.randint(2, 40)} {unit}" for g in given)
    whose = " and ".join(f"{g} is {rng.randint(2, 40)} {unit}" for g in given)
    article = "An" if shape[0] in "aeiou" else "A"
    a, b = rng.randint(2, 5), rng.randint(2, 30)
    options = (
        f"{article} {shape} has {facts}. Find its {target}.", f"{article} {shape} has {facts}. What is its {target}?",
        f"Calculate the {target} of a {shape} with {facts}.", f"Determine the {target} of a {shape} whose {whose}.",
        f"Work out the {target} of a {shape} with {facts}.", f"Find the {target} of {article.lower()} {shape}: {facts}.",
        f"How does the {target} of a {shape} change when its {given[0]} doubles?",
        f"{article} {shape} has {facts}. If every measure grows by {a * 10}%, by how much does its {target} grow?",
    )  # fmt: skip
    if len(given) > 1:  # a relation between two of its measures
        options += (
            f"The {given[0]} of a {shape} is {a} times its {given[1]}, and its {target} is {a * b * b}. Find the {given[1]}.",
            f"The {given[1]} of a {shape} is {b} {unit} less than its {given[0]}. If its {target} is {b * 4}, find both.",
        )  # fmt: skip
    return {"text": dress(rng, phrase(rng, options) + rng.choice(MATH_TAILS))}


# The twin of code/howto_plain: the same "How do I ...?" voices about tasks done with the hands, the
# house, money or people, answered in steps and words. Without it "How do I ...?" read code whatever
# followed: a probe of everyday questions of my own (check set X) had 6 of 24 read code ("remove a
# stripped screw" 0.88, "jump start a car battery" 0.73). Tasks written for this template; benign only.
PRACTICAL_TASKS = (
    "hang a heavy mirror on a plaster wall", "fix a dripping kitchen tap", "reset a tripped circuit breaker",
    "stop a door from squeaking", "seal the gaps around a window", "replace a broken tile in the bathroom",
    "paint a room without leaving streaks", "get mould off a shower curtain", "clean a microwave quickly",
    "remove limescale from a shower head", "get chewing gum out of hair", "wash a wool sweater without shrinking it",
    "iron a dress shirt properly", "sew a button back on", "remove a coffee stain from a carpet",
    "keep a cut avocado from browning", "boil an egg so the yolk stays soft", "sharpen a kitchen knife with a whetstone",
    "make fluffy rice on the stove", "cook a steak medium rare in a pan", "proof bread dough in a cold kitchen",
    "make a roux that doesn't go lumpy", "store fresh herbs so they last longer", "caramelise onions properly",
    "grow tomatoes on a balcony", "repot an overgrown houseplant", "get rid of aphids on roses naturally",
    "start a compost heap", "prune an apple tree", "lay turf on a bare patch of lawn",
    "check the tyre pressure on my car", "change the wiper blades on my car", "defrost a car windscreen quickly",
    "adjust the brakes on a bicycle", "fix a slipped bike chain", "parallel park in a tight spot",
    "save for a house deposit on a modest salary", "make a monthly household budget", "dispute a wrong charge on my bank statement",
    "ask my landlord to fix the heating", "write a polite complaint to an airline", "split rent fairly between flatmates",
    "get over jet lag faster", "pack a carry-on for a two-week trip", "find cheap flights for the holidays",
    "introduce a new cat to my dog", "trim my dog's nails without hurting him", "get my cat to stop scratching the sofa",
    "house-train a puppy", "keep a goldfish tank clean", "calm a nervous horse",
    "knit a simple scarf", "fold a paper crane", "start a fire without matches when camping",
    "pitch a tent in the rain", "read a topographic map", "tell if a melon is ripe",
    "fall asleep faster", "build a habit of running in the morning", "warm up properly before a long run",
    "improve my posture at a desk", "learn to swim as an adult", "do a proper push-up",
    "tune a guitar by ear", "play a barre chord cleanly", "memorise a speech",
    "make small talk at a networking event", "apologise to a friend I upset", "say no to extra work politely",
    "prepare for a job interview", "ask for a reference from a former boss", "settle a toddler's tantrum in a shop",
    "get my teenager to talk to me more", "plan a child's birthday party on a budget", "teach a child to ride a bike",
    "remove a splinter", "treat a mild sunburn", "stop hiccups",
    "take better photos with my phone", "frame a picture without a professional", "move a piano up a flight of stairs",
)  # fmt: skip


def _practical_howto(rng: random.Random, corpus: Corpus) -> dict:
    task = rng.choice(PRACTICAL_TASKS)
    ask = phrase(rng, (
        *howto_voices(task), f"{task[0].upper()}{task[1:]}: how?",
        f"How do you {task}?", f"Need to {task}. How?", f"How do I {task} without special tools?",
        f"Any tips on how to {task}?", f"Walk me through how to {task}.", f"Is there an easy way to {task}?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# The twin of code/held_data: the same voices (a first-person goal, a question about groups, an
# imperative) about the world, not about data the user holds: answered in words.
WORLD_TOPICS = (
    ("the planets", "planet", "moons", "the solar system"), ("coffee", "country", "coffee production", "the coffee trade"),
    ("bees", "kind of bee", "lifespan", "bee colonies"), ("the Roman emperors", "dynasty", "reign", "ancient Rome"),
    ("mountains", "continent", "height", "mountaineering"), ("volcanoes", "region", "eruptions", "volcanology"),
    ("languages", "language family", "speakers", "linguistics"), ("rivers", "continent", "length", "river systems"),
    ("the Olympic games", "host city", "medals", "sports history"), ("sleep", "age group", "hours of sleep", "sleep science"),
    ("whales", "species", "body length", "marine biology"), ("castles", "century", "wall thickness", "medieval building"),
)  # fmt: skip


def _world_interest(rng: random.Random, corpus: Corpus) -> dict:
    topic, group, amount, field_ = rng.choice(WORLD_TOPICS)
    goal, direct = rng.choice((
        (f"know which {group} has the most {amount}", f"Which {group} has the most {amount}?"),
        (f"understand why {amount} differs so much between {topic}", f"Why does {amount} differ so much between {topic}?"),
        (f"learn the basics of {field_}", f"Explain the basics of {field_}."),
        (f"know the average {amount} of {topic}", f"What is the average {amount} of {topic}?"),
        (f"compare {topic} by {amount}", f"Compare {topic} by {amount} in a few sentences."),
        (f"read something about the history of {field_}", f"Tell me about the history of {field_}."),
        (f"know how many {topic} there are in each {group}", f"Roughly how many {topic} are there in each {group}?"),
        (f"find a good book about {field_}", f"Recommend a good book about {field_}."),
    ))  # fmt: skip
    ask = phrase(rng, (
        f"I want to {goal}.", f"I'd like to {goal}.", f"I'm interested in {field_}: I want to {goal}.", direct,
        f"My goal: {goal}.", f"I have a question about {topic}. {direct}", f"For a school project I need to {goal}.",
        f"Is there a quick way to {goal}?", f"We want to {goal}. Can you help?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# Everyday lists with a format to keep ("separated by commas", "one per line", "in alphabetical order"):
# the reply is a line or a few lines of words. The separators and order words were code cues (string
# splitting and sorting asks hold them): a probe of my own (check set AA) had 10 of 24 read code ("Name
# the months that have 31 days, comma-separated, in order." 0.97). Subjects written for this template.
LIST_SUBJECTS = (
    ("bird", "birds that migrate south for the winter"), ("fish", "freshwater fish common in European rivers"),
    ("tree", "trees that lose their leaves in autumn"), ("flower", "spring flowers that grow from bulbs"),
    ("mammal", "mammals that live in the Arctic"), ("insect", "insects that pollinate crops"),
    ("dog breed", "dog breeds that suit a small flat"), ("cheese", "French cheeses"),
    ("spice", "spices used in a typical curry"), ("fruit", "tropical fruits"), ("bread", "Italian breads"),
    ("dessert", "classic British desserts"), ("cocktail", "cocktails made with rum"), ("pasta shape", "pasta shapes"),
    ("capital", "capitals of South American countries"), ("island", "Greek islands worth visiting"),
    ("mountain", "the highest mountains in the Alps"), ("desert", "the largest deserts on Earth"),
    ("river", "rivers that flow through Paris, London, Vienna and Budapest"), ("city", "cities on the Danube"),
    ("composer", "Baroque composers"), ("novel", "novels by Jane Austen"), ("poet", "Romantic poets"),
    ("painter", "Dutch Golden Age painters"), ("opera", "operas by Verdi"), ("film", "films directed by Hitchcock"),
    ("band", "bands from Liverpool"), ("dance", "Latin American dances"), ("instrument", "woodwind instruments"),
    ("sport", "sports played with a racket"), ("team", "football clubs in Madrid"), ("event", "events in a decathlon"),
    ("element", "alkali metals"), ("organ", "organs of the digestive system"), ("vitamin", "vitamins that dissolve in fat"),
    ("constellation", "constellations of the zodiac"), ("moon", "moons of Jupiter"), ("cloud", "types of cloud"),
    ("emperor", "Roman emperors of the first century"), ("queen", "queens of England"), ("war", "wars of the 19th century"),
    ("invention", "inventions of the Industrial Revolution"), ("explorer", "explorers who reached the South Pole"),
    ("word", "words that mean 'very tired'"), ("idiom", "English idioms about money"), ("prefix", "prefixes that mean 'not'"),
    ("language", "Romance languages"), ("greeting", "ways to say hello in different languages"),
    ("tool", "tools you need to hang a picture"), ("board game", "board games for two players"),
    ("hobby", "hobbies you can do at home"), ("houseplant", "houseplants that survive low light"),
    ("name", "girls' names that start with E"), ("currency", "currencies used in Asia"), ("sauce", "French mother sauces"),
    ("colour", "shades of blue"), ("fabric", "natural fabrics"), ("knot", "sailing knots"),
    ("yoga pose", "yoga poses for beginners"), ("muscle", "muscles of the leg"), ("tea", "kinds of green tea"),
    ("festival", "Hindu festivals"), ("holiday", "public holidays in Ireland"), ("saint", "patron saints of the UK"),
)  # fmt: skip
LIST_FORMATS = (
    "separated by commas", "comma-separated", "separated by semicolons", "one per line", "one per line, no numbering",
    "as a numbered list", "as a bulleted list", "in alphabetical order, separated by commas", "separated by slashes",
    "in a single line, separated by commas", "separated by ' | '", "in lowercase, separated by commas",
    "in capital letters, one per line", "separated by commas and nothing else", "from oldest to newest, one per line",
    "separated by spaces", "separated by commas, with 'and' before the last one", "in order, separated by dashes",
)  # fmt: skip


def _format_list(rng: random.Random, corpus: Corpus) -> dict:
    """An everyday list with a format to keep (no corpus material)."""
    _, subject = rng.choice(LIST_SUBJECTS)
    form, n = rng.choice(LIST_FORMATS), rng.randint(3, 12)
    ask = phrase(rng, (
        f"List {n} {subject}, {form}.", f"Name {n} {subject}, {form}.", f"Give me {n} {subject}, {form}.",
        f"List the {subject} {form}.", f"Which are the best-known {subject}? Answer {form}.",
        f"Write down {n} {subject} {form}.", f"What are some {subject}? Reply {form}, nothing more.",
        f"I need a list of {subject}, {form}.", f"Can you name {n} {subject}? Put them {form}.",
        f"{n} {subject}, {form}, please.", f"Tell me {n} {subject}. Format: {form}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


TEMPLATES: tuple[Template, ...] = (
    Template("prose/summarise", "prose", _summarise, 130),
    Template("prose/explain_code", "prose", _explain_code, 110),
    Template("prose/essay", "prose", _essay, 100),
    Template("prose/explain_concept", "prose", _explain_concept, 110),
    Template("prose/story_poem", "prose", _story_poem, 70),
    Template("prose/email_letter", "prose", _email_letter, 70),
    Template("prose/rewrite_text", "prose", _rewrite_text, 70),
    Template("prose/translate_text", "prose", _translate_text, 50),
    Template("prose/describe_data", "prose", _describe_data, 80),
    Template("prose/explain_query_config", "prose", _explain_query_or_config, 80),
    Template("prose/literary_question", "prose", _literary_question, 50),
    Template("prose/quote_meaning", "prose", _quote_meaning, 50),
    Template("prose/advice", "prose", _advice, 50),
    Template("prose/compare", "prose", _compare, 50),
    Template("prose/tips_ideas", "prose", _tips_and_ideas, 80),
    Template("prose/math", "prose", _math_question, 70),
    Template("prose/followup", "prose", _followup_prose, 70),
    Template("prose/system_persona", "prose", _system_persona, 50),
    Template("prose/multilingual", "prose", _multilingual_prose, 60),
    Template("prose/programming_question", "prose", _programming_question, 100),
    Template("prose/writing_brief", "prose", _writing_brief, 80),
    Template("prose/math_notation", "prose", _math_notation, 100),
    Template("prose/world_interest", "prose", _world_interest, 100),
    Template("prose/measure_problem", "prose", _measure_problem, 80),
    Template("prose/practical_howto", "prose", _practical_howto, 100),
    Template("prose/format_list", "prose", _format_list, 100),
    Template("prose/tooling_question", "prose", _tooling_question, 60),
)
