"""Templates whose expected reply is code (a program, function, script, patch, test, markup)."""

from __future__ import annotations

import random

from classifier.dataset.common import (
    phrase,
    CODE_LANGS, FENCE_TAGS, Template, around, clip, code_with_lang, describe_as_clause, dress, howto_voices, paste,
)  # fmt: skip
from classifier.dataset.corpus import Corpus, table_csv

ALGORITHMS = (
    "binary search", "quicksort", "merge sort", "Dijkstra's shortest path", "a trie with insert and lookup",
    "an LRU cache", "breadth-first search on a grid", "a min-heap", "topological sort", "union-find",
    "the Levenshtein distance", "a rate limiter (token bucket)", "run-length encoding", "a ring buffer",
    "matrix multiplication", "the sieve of Eratosthenes", "a bloom filter", "reservoir sampling",
    "a debounce helper", "a thread-safe counter", "an interval merge", "a JSON pretty printer",
    "a retry with exponential backoff", "a producer/consumer queue", "a simple tokenizer for arithmetic",
    "FizzBuzz", "a linked list reversal", "the knapsack problem with dynamic programming", "a sudoku solver",
    "the longest common subsequence", "a URL shortener's encode/decode", "a markdown-to-HTML converter for headings",
    "a k-means clustering step", "an in-memory key-value store with TTL", "a CSV parser that handles quotes",
    "a binary tree's level-order traversal", "a palindrome checker", "a word frequency counter",
    "a circular buffer logger", "a rolling average over a stream",
)  # fmt: skip

BUG_REPORTS = (
    "It crashes with an IndexError on empty input.", "It returns None sometimes and I don't know why.",
    "The output is off by one.", "It's way too slow on large inputs.", "It hangs forever.",
    "It fails when the input has unicode characters.", "The tests say the result is wrong for negative numbers.",
    "Sometimes it throws a null pointer exception.", "It leaks memory.", "Results differ between runs.",
    "", "", "",
)  # fmt: skip

SHELL_TASKS = (
    "find all files larger than 100 MB under /var and list them by size",
    "rename every .jpeg file in a folder to .jpg", "count lines of code in all .py files recursively",
    "kill the process listening on port 8080", "back up a Postgres database every night with cron",
    "tail a log and print only lines containing ERROR with a timestamp", "replace tabs with 4 spaces in all files",
    "download a list of URLs in parallel", "show the 10 biggest directories in my home folder",
    "extract every email address from a text file", "check if a host is up and send a mail if it is down",
    "compress every subdirectory into its own tar.gz", "print the git authors sorted by number of commits",
    "watch a directory and rerun the tests when a file changes", "convert all .wav files to .mp3 with ffmpeg",
    "delete docker images older than a week", "batch-resize PNG images to 800px wide",
)  # fmt: skip

WEB_TASKS = (
    "a responsive navbar with a hamburger menu", "a login form with client-side validation",
    "a modal dialog that closes on Escape", "a dark-mode toggle that remembers the choice",
    "an infinite-scroll list that fetches pages from /api/items", "a countdown timer component",
    "a drag-and-drop file upload area", "a sortable table", "a React hook that debounces a value",
    "a Vue component for a star rating", "an Express route that uploads a file to S3",
    "a CSS grid photo gallery", "a Flask endpoint that returns paginated results",
    "a FastAPI app with a health check and one POST endpoint", "a Django model for blog posts with tags",
)  # fmt: skip


HOWTO_TASKS = (
    "read a file line by line", "parse a JSON string into an object", "sort a dictionary by value",
    "make an HTTP GET request with a timeout", "remove duplicates from a list while keeping order", "reverse a string",
    "read environment variables with a default", "run a shell command and capture its output", "format a date as ISO 8601",
    "check if a file exists", "spawn a background thread", "merge two maps", "write a list of rows to a CSV file",
    "hash a password", "measure how long a block takes", "retry a failing network call", "parse command-line flags",
    "iterate over a directory recursively", "convert a string to an integer safely", "zip two lists together",
    "read a YAML config file", "connect to a Postgres database", "send an email", "generate a random UUID",
    "split a string on multiple delimiters", "deep copy an object", "flatten a nested list", "pad a number with zeros",
)  # fmt: skip


def _howto(rng: random.Random, corpus: Corpus) -> dict:
    task, lang = rng.choice(HOWTO_TASKS), rng.choice(CODE_LANGS)
    ask = phrase(rng, (
        f"How do I {task} in {lang}?", f"What's the idiomatic way to {task} in {lang}?", f"{lang}: how to {task}?",
        f"how to {task} {lang.lower()}", f"Is there a built-in way to {task} in {lang}? Show me.",
        f"Best way to {task} with {lang}?", f"In {lang}, how can I {task}?", f"snippet to {task} in {lang} pls",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _write_function(rng: random.Random, corpus: Corpus) -> dict:
    snippet = rng.choice([c for c in corpus.code if 20 <= len(c.description) <= 240])
    lang = snippet.language if rng.random() < 0.5 else rng.choice(CODE_LANGS)
    clause = describe_as_clause(snippet.description)
    ask = phrase(rng, (
        f"Write a {lang} function that {clause}.",
        f"Can you write me a {lang} function which {clause}?",
        f"I need a {lang} helper that {clause}.",
        f"Implement this in {lang}: {snippet.description}",
        f"{snippet.description}\n\nWrite this in {lang}.",
        f"Give me {lang} code for a function that {clause}.",
        f"Create a small {lang} utility: it {clause}.",
        f"write {lang.lower()} code: {clause}",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _implement_algorithm(rng: random.Random, corpus: Corpus) -> dict:
    algo, lang = rng.choice(ALGORITHMS), rng.choice(CODE_LANGS)
    ask = phrase(rng, (
        f"Implement {algo} in {lang}.", f"Show me {algo} in {lang}, with comments.",
        f"How would I code {algo} in {lang}? Just the code please.", f"{lang} implementation of {algo}?",
        f"Write {algo} in idiomatic {lang} with a small usage example.", f"Code {algo} ({lang}), no explanation.",
        f"I have an interview tomorrow. Write {algo} in {lang} the way an interviewer would expect.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _fix_bug(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus)
    ask = phrase(rng, (
        "Fix the bug in this code.", "This doesn't work. Can you fix it?", "Find and fix the bug:",
        "Please correct this function and give me the fixed version.", "What's wrong here? Send the corrected code.",
        f"My {snippet.language} code is broken. Patch it.", "fix this", "Can you debug this and rewrite it so it works?",
    ))  # fmt: skip
    report = rng.choice(BUG_REPORTS)
    return {"text": dress(rng, around(rng, f"{ask} {report}".strip(), clip(rng, snippet.code), FENCE_TAGS.get(snippet.language, "")))}


def _refactor(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus)
    ask = phrase(rng, (
        "Refactor this to be more readable.", "Add type hints and docstrings to this.", "Make this code faster.",
        "Rewrite this using modern idioms.", "Split this into smaller functions.", "Add error handling to this function.",
        "Clean this up, rename the variables to something sensible.", "Add logging to this code.",
        "Make this function async.", "Remove the duplication in this code.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, clip(rng, snippet.code), FENCE_TAGS.get(snippet.language, "")))}


def _translate_code(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus)
    target = rng.choice([lang for lang in CODE_LANGS if lang != snippet.language])
    ask = phrase(rng, (
        f"Translate this {snippet.language} code to {target}.", f"Port this to {target}.",
        f"Rewrite in {target}:", f"How would this look in {target}? Give the full code.",
        f"Convert the following function from {snippet.language} into {target}.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, clip(rng, snippet.code), FENCE_TAGS.get(snippet.language, "")))}


def _unit_tests(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus)
    framework = {"Python": "pytest", "Go": "the testing package", "Ruby": "RSpec", "Perl": "Test::More"}.get(
        snippet.language, "a test framework"
    )
    ask = phrase(rng, (
        f"Write unit tests for this with {framework}.", "Write tests covering the edge cases of this function.",
        "Generate unit tests for the code below.", f"Give me {framework} tests for this.",
        "I need 100% branch coverage for this. Write the tests.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, clip(rng, snippet.code), FENCE_TAGS.get(snippet.language, "")))}


def _complete_code(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus)
    lines = snippet.code.splitlines()
    partial = "\n".join(lines[: max(2, len(lines) // 2)])
    ask = phrase(rng, (
        "Complete this function.", "Finish the implementation:", "Continue this code.",
        "Fill in the rest of this.", "complete the code below", "What comes next? Write the remaining lines.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, partial, FENCE_TAGS.get(snippet.language, "")))}


def _shell(rng: random.Random, corpus: Corpus) -> dict:
    task = rng.choice(SHELL_TASKS)
    ask = phrase(rng, (
        f"Bash one-liner to {task}?", f"Write a shell script to {task}.", f"How do I {task} from the terminal? Command only.",
        f"Give me a PowerShell script to {task}.", f"write a python script to {task}", f"Need a zsh function to {task}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _web_ui(rng: random.Random, corpus: Corpus) -> dict:
    task = rng.choice(WEB_TASKS)
    ask = phrase(rng, (
        f"Build {task}.", f"Write the code for {task}.", f"Can you create {task}? Use plain HTML/CSS/JS.",
        f"Implement {task} in TypeScript.", f"Show me how to make {task}, full code.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _parse_data_script(rng: random.Random, corpus: Corpus) -> dict:
    """Pasted data, but the ask is for a program that processes it: the reply is code."""
    table = rng.choice(corpus.tables)
    data = table_csv(table, rng.randint(3, 10))
    col = rng.choice(table.header[1:])
    ask = phrase(rng, (
        f"Write a Python script that reads this CSV and plots {col}.",
        f"Write pandas code that loads this file and computes the mean of {col} per group.",
        f"I have a CSV like this. Write a Go program that parses it into structs.",
        f"Write a function that validates rows of this CSV (column {col} must be numeric).",
        f"Write R code to load this data and fit a linear model of {col}.",
        f"Give me JavaScript that turns this CSV into an HTML table in the browser.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, data, "csv"))}


def _json_handling_code(rng: random.Random, corpus: Corpus) -> dict:
    doc = clip(rng, rng.choice(corpus.json_docs), 150, 900)
    ask = phrase(rng, (
        "Write a Python dataclass model for this JSON and a function to load it.",
        "Write TypeScript interfaces for this JSON and a fetch wrapper that returns them.",
        "Write Go structs with json tags for this payload.",
        "Write a Rust serde struct that deserialises this.",
        "Write a jq-free Python script that prints every key path in this JSON.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, doc, "json"))}


def _sql_to_code(rng: random.Random, corpus: Corpus) -> dict:
    query = clip(rng, rng.choice(corpus.sql), 60, 700)
    ask = phrase(rng, (
        "Rewrite this query as pandas code.", "Write a Python function that runs this query with psycopg and returns dicts.",
        "Turn this into SQLAlchemy ORM code.", "Write a Java JDBC method that executes this with a prepared statement.",
        "Convert this SQL into a PySpark DataFrame pipeline.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, query, "sql"))}


def _traceback(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus, ("Python",))
    name = snippet.code.split("(")[0].replace("def ", "").replace("async ", "").strip()
    error = rng.choice((
        "TypeError: unsupported operand type(s) for +: 'int' and 'str'", "KeyError: 'name'",
        "AttributeError: 'NoneType' object has no attribute 'split'", "ValueError: too many values to unpack",
        "RecursionError: maximum recursion depth exceeded", "IndexError: list index out of range",
    ))  # fmt: skip
    trace = f'Traceback (most recent call last):\n  File "app.py", line {rng.randint(10, 300)}, in {name}\n{error}'
    ask = phrase(rng, (
        "I get this error. Fix the code so it works:", "Getting the traceback below, please send a corrected version.",
        "Why does this blow up? Give me the fixed function.", "fix my code",
    ))  # fmt: skip
    return {"text": dress(rng, f"{ask}\n\n{paste(rng, clip(rng, snippet.code), 'python')}\n\n{trace}")}


def _regex(rng: random.Random, corpus: Corpus) -> dict:
    target = rng.choice((
        "ISO dates like 2024-03-01", "UK postcodes", "IPv4 addresses", "hex colours like #a1b2c3", "semantic versions",
        "email addresses", "US phone numbers", "hashtags in a tweet", "Markdown links", "log lines with a level and a message",
    ))  # fmt: skip
    lang = rng.choice(CODE_LANGS[:10])
    ask = phrase(rng, (
        f"Regex that matches {target}?", f"Write a {lang} function using a regex to extract {target}.",
        f"Give me a regular expression for {target}, plus a {lang} snippet that uses it.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _followup_code(rng: random.Random, corpus: Corpus) -> dict:
    """Multi-turn: earlier turns are prose discussion, the last ask is for code."""
    topic = rng.choice(ALGORITHMS)
    lang = rng.choice(CODE_LANGS)
    messages = [
        {"role": "user", "content": rng.choice((f"How does {topic} work?", f"Explain {topic} in simple terms.", f"What is {topic} used for?"))},
        {"role": "assistant", "content": clip(rng, rng.choice(corpus.tech_prose), 150, 600)},
        {"role": "user", "content": dress(rng, phrase(rng, (
            f"Great, now write it in {lang}.", f"ok show me the {lang} code", f"Can you implement that in {lang}?",
            f"Now give me a {lang} version I can paste into my project.", "Write the code for that.",
        )))},
    ]  # fmt: skip
    if rng.random() < 0.4:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEM_GENERIC)})
    return {"messages": messages}


def _system_coder(rng: random.Random, corpus: Corpus) -> dict:
    system = phrase(rng, (
        "You are an expert software engineer. Answer with code only.", "You are a coding assistant inside an IDE.",
        "You write production-quality Python. No explanations unless asked.", "You are Copilot-like: complete code.",
        "You are a senior Go developer reviewing and writing code.",
    ))  # fmt: skip
    snippet = rng.choice([c for c in corpus.code if c.description] or corpus.code)
    user = phrase(rng, (
        f"{describe_as_clause(snippet.description)}", f"need: {snippet.description}",
        f"function that {describe_as_clause(snippet.description)}", f"Task: {snippet.description}",
    ))  # fmt: skip
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def _multilingual_code(rng: random.Random, corpus: Corpus) -> dict:
    algo, lang = rng.choice(ALGORITHMS), rng.choice(CODE_LANGS)
    ask = phrase(rng, (
        f"Escribe una función en {lang} que implemente {algo}.", f"Écris une fonction {lang} qui implémente {algo}.",
        f"Schreibe ein {lang}-Programm für {algo}.", f"Scrivi una funzione in {lang} per {algo}.",
        f"Escreva um código em {lang} para {algo}.", f"用{lang}写一个函数实现{algo}。", f"{lang}で{algo}を実装するコードを書いてください。",
        f"Напиши функцию на {lang}, которая реализует {algo}.", f"{lang}로 {algo}를 구현하는 코드를 작성해 주세요.",
        f"Schrijf een {lang}-functie voor {algo}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _multilingual_fix(rng: random.Random, corpus: Corpus) -> dict:
    snippet = code_with_lang(rng, corpus)
    ask = phrase(rng, (
        "Corrige este código, por favor:", "Peux-tu corriger ce code ?", "Bitte korrigiere diesen Code:",
        "修复这段代码中的错误：", "このコードのバグを直してください。", "Исправь ошибку в этом коде:", "Correggi questo codice:",
    ))  # fmt: skip
    return {"text": around(rng, ask, clip(rng, snippet.code), FENCE_TAGS.get(snippet.language, ""))}


# Digital-design asks (RTL, testbenches). Written here, not taken from any benchmark: component names
# from textbook lists, ports as a designer would spell them. Uses no corpus material, so these
# prompts do not depend on the package versions the rest of the set is harvested from.
HARDWARE_PARTS = (
    ("a 2-to-1 multiplexer", "a, b, sel", "y"), ("a 4-to-1 multiplexer with a 2-bit select", "d[3:0], sel[1:0]", "y"),
    ("a 3-to-8 decoder with enable", "en, a[2:0]", "y[7:0]"), ("an 8-bit priority encoder", "req[7:0]", "idx[2:0], valid"),
    ("a 4-bit ripple-carry adder", "a[3:0], b[3:0], cin", "sum[3:0], cout"), ("a full adder", "a, b, cin", "s, cout"),
    ("an 8-bit up/down counter with synchronous reset", "clk, rst, up", "count[7:0]"),
    ("a D flip-flop with asynchronous active-low reset", "clk, rst_n, d", "q"),
    ("a 16-bit shift register with parallel load", "clk, load, din[15:0], sin", "q[15:0]"),
    ("a rising-edge detector", "clk, sig", "pulse"), ("a divide-by-10 clock divider", "clk, rst", "clk_out"),
    ("a PWM generator with an 8-bit duty cycle", "clk, duty[7:0]", "pwm"), ("a push-button debouncer", "clk, btn", "clean"),
    ("a traffic-light controller state machine", "clk, rst, car_waiting", "red, yellow, green"),
    ("a Mealy detector for the bit sequence 1011", "clk, rst, x", "z"),
    ("a 32-bit ALU doing add, sub, and, or and xor", "a[31:0], b[31:0], op[2:0]", "y[31:0], zero"),
    ("a synchronous FIFO with 16 entries of 8 bits", "clk, rst, wr_en, rd_en, din[7:0]", "dout[7:0], full, empty"),
    ("a UART transmitter (8N1)", "clk, start, data[7:0]", "tx, busy"), ("a 4-bit LFSR", "clk, rst", "q[3:0]"),
    ("an 8-bit magnitude comparator", "a[7:0], b[7:0]", "gt, eq, lt"),
    ("a register file of eight 16-bit registers with two read ports",
     "clk, we, waddr[2:0], wdata[15:0], raddr1[2:0], raddr2[2:0]", "rdata1[15:0], rdata2[15:0]"),
    ("an even-parity generator for one byte", "data[7:0]", "parity"),
    ("a BCD to seven-segment decoder", "bcd[3:0]", "seg[6:0]"), ("a 4-bit Gray-code counter", "clk, rst", "g[3:0]"),
    ("a 2-bit saturating counter for branch prediction", "clk, taken, update", "predict"),
    ("a vending-machine FSM that accepts 5 and 10 cent coins", "clk, rst, nickel, dime", "vend"),
    ("a 256 x 8 single-port RAM", "clk, we, addr[7:0], din[7:0]", "dout[7:0]"),
    ("an 8-bit barrel shifter", "in[7:0], amt[2:0], dir", "out[7:0]"), ("a JK flip-flop", "clk, j, k", "q, qn"),
    ("a one-hot four-state ring that advances on enable", "clk, rst, en", "state[3:0]"),
)  # fmt: skip
HDLS = ("Verilog", "SystemVerilog", "VHDL", "Verilog-2001", "Chisel", "Verilog")


def _hardware(rng: random.Random, corpus: Corpus) -> dict:
    (part, ins, outs), hdl = rng.choice(HARDWARE_PARTS), rng.choice(HDLS)
    ask = phrase(rng, (
        f"Write a {hdl} module for {part}.", f"Implement {part} in {hdl}.", f"Design {part}. Use {hdl}.",
        f"I need RTL for {part}, {hdl} please.",
        f"Create a module that implements {part}. Inputs: {ins}. Outputs: {outs}.",
        f"Build {part} with inputs {ins} and outputs {outs}.",
        f"The block takes {ins} and drives {outs}; it is {part}. Write it.",
        f"Give me a {hdl} testbench for {part}.", f"{part[0].upper()}{part[1:]}: ports {ins} -> {outs}. Code it in {hdl}.",
        f"Can you write the {hdl} for {part}?", f"Synthesizable {hdl} for {part}, ports {ins} / {outs}.",
        f"Design {part}: inputs {ins}, outputs {outs}. Everything synchronous to clk where there is one.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# Specifications that state what a block must do and ask for nothing explicitly: a reader who
# designs hardware answers with RTL. Sentences are assembled from textbook behaviours (gates,
# registers, counters, multiplexers, state machines, truth tables) so that no two prompts share a
# fixed wording; no benchmark text is used.
_WIDTHS = (1, 2, 3, 4, 5, 8, 12, 16, 32, 64, 100, 128, 255, 256)
_COMB_BEHAVIOURS = (
    "{o} is the bitwise {gate} of {a} and {b}", "{o} is high only when every bit of {a} is high",
    "{o} is 1 when {a} has an odd number of ones", "{o} is {a} with its bit order reversed",
    "{o} counts how many bits of {a} are set", "{o} selects {a} when {s} is 0 and {b} when {s} is 1",
    "{o} is the sum of {a} and {b}, with the carry on a separate output", "{o} is {a} shifted left by one, filling with zero",
    "{o} is the larger of the two unsigned inputs {a} and {b}", "{o} is asserted when {a} equals {b}",
    "{o} is the two's complement of {a}", "{o} is the {gate} of all the bits of {a}",
    "{o} is the index of the lowest set bit of {a}, or zero when none is set",
    "{o} drives {a} when {s} is high and holds zero otherwise", "{o} repeats bit 0 of {a} across every bit",
    "{o} is {a} sign-extended to twice its width", "{o} is the sum of {a}, {b} and the carry-in",
    "{o} turns on the segment pattern of the decimal digit on {a}", "{o} is 1 when {a} is greater than {b}",
)  # fmt: skip
_SEQ_BEHAVIOURS = (
    "on every rising edge of {clk}, {q} takes the value of {d}", "{q} increments on each positive clock edge and wraps to 0 after {n}",
    "an active-high synchronous {rst} sets {q} to zero", "an asynchronous active-low reset clears {q} immediately",
    "when {load} is high the register loads {d}; otherwise it shifts right by one bit each cycle",
    "{q} toggles at a clock edge whenever {t} is 1", "the register keeps its value while the enable is low",
    "{q} counts down from {n} to 0 and then stops", "{q} is the value of {d} delayed by three clock cycles",
    "a one-cycle pulse appears on {q} whenever {d} goes from 0 to 1", "the accumulator adds {d} to {q} on every clock edge",
    "bit i of {q} is set on the cycle after bit i of {d} falls, and stays set until reset",
    "the shift register moves {d} into the most significant bit each cycle", "{q} cycles through a one-hot pattern",
    "the counter resets to {n} when {rst} is asserted and counts up to {m} before wrapping",
)  # fmt: skip
_GATES = ("AND", "OR", "XOR", "NAND", "NOR", "XNOR")
_STATE_NAMES = (("A", "B", "C", "D"), ("IDLE", "START", "DATA", "STOP"), ("S0", "S1", "S2", "S3"), ("OFF", "ON", "WAIT", "DONE"))


def _ports(rng: random.Random) -> dict:
    a, b = rng.choice((("a", "b"), ("x", "y"), ("in1", "in2"), ("in", "data"), ("p", "q2"), ("A", "B")))
    outputs = [o for o in ("out", "y", "z", "f", "result", "o") if o not in (a, b)]
    return {"a": a, "b": b, "o": rng.choice(outputs), "s": rng.choice(("sel", "s", "en")),
            "gate": rng.choice(_GATES), "clk": rng.choice(("clk", "clock")), "q": rng.choice(("q", "count", "out", "r")),
            "d": rng.choice(("d", "in", "data", "x")), "rst": rng.choice(("reset", "rst", "clear")),
            "load": rng.choice(("load", "ld", "we")), "t": rng.choice(("t", "toggle", "en")),
            "n": rng.choice((5, 7, 9, 10, 15, 99, 255)), "m": rng.choice((12, 31, 63, 999))}  # fmt: skip


def _port_sentence(rng: random.Random, names: dict, sequential: bool) -> str:
    w1, w2 = rng.choice(_WIDTHS), rng.choice(_WIDTHS)
    ins = [names["a"], names["b"]] if not sequential else [names["clk"], names["rst"], names["d"]]
    outs = [names["o"]] if not sequential else [names["q"]]
    return phrase(rng, (
        f"It has {len(ins)} inputs ({', '.join(ins)}) and {len(outs)} output ({outs[0]}).",
        f"Inputs: {', '.join(ins)} ({w1} bits each). Output: {outs[0]} ({w2} bits).",
        f"Ports: {', '.join(f'input {p}' for p in ins)}, output [{w2 - 1}:0] {outs[0]}.",
        f"{ins[0]} is a {w1}-bit input and {outs[0]} is a {w2}-bit output.", "",
        f"The interface is {', '.join(ins)} in and {outs[0]} out.",
    ))  # fmt: skip


def _behaviour(rng: random.Random, names: dict, sequential: bool) -> str:
    pool = _SEQ_BEHAVIOURS if sequential else _COMB_BEHAVIOURS
    return rng.choice(pool).format(**names)


def _fsm(rng: random.Random) -> str:
    states, x = rng.choice(_STATE_NAMES), rng.choice(("x", "in", "w", "go"))
    lines = [f"From {s}, if {x} is 1 go to {states[(i + 1) % 4]}, otherwise {rng.choice(('stay in ' + s, 'go to ' + states[0]))}."
             for i, s in enumerate(states)]  # fmt: skip
    out = f"The output {rng.choice(('z', 'out', 'done'))} is 1 only in state {states[-1]}."
    reset = f"{rng.choice(('A synchronous', 'An asynchronous', 'An active-high'))} reset returns the machine to {states[0]}."
    kind = rng.choice(("Moore", "Mealy", "finite"))
    head = phrase(rng, (
        f"Implement this {kind} state machine.", f"A {kind} state machine with states {', '.join(states)}.",
        f"Consider the {kind} FSM below.", f"The FSM has four states: {', '.join(states)}.", "State machine:",
    ))  # fmt: skip
    return "\n".join([head, *lines, out, reset])


def _truth_table(rng: random.Random) -> str:
    inputs = rng.choice((("a", "b"), ("x1", "x2", "x3"), ("a", "b", "c")))
    out = rng.choice(("f", "y", "out"))
    rows = [" ".join(inputs) + f" | {out}"]
    for value in range(1 << len(inputs)):
        bits = format(value, f"0{len(inputs)}b")
        rows.append(" ".join(bits) + f" | {rng.randint(0, 1)}")
    head = phrase(rng, (
        f"Implement the combinational circuit given by this truth table.", f"The circuit computes {out} as follows:",
        f"Truth table for {out}:", f"Given the table below, build the logic for {out}.", f"{out} is defined by:",
    ))  # fmt: skip
    return head + "\n" + "\n".join(rows)


def _hardware_spec(rng: random.Random, corpus: Corpus) -> dict:
    names = _ports(rng)
    sequential = rng.random() < 0.5
    kind = rng.random()
    if kind < 0.15:
        return {"text": dress(rng, _fsm(rng))}
    if kind < 0.27:
        return {"text": dress(rng, _truth_table(rng))}
    behaviour = _behaviour(rng, names, sequential)
    more = _behaviour(rng, names, sequential) if rng.random() < 0.4 else ""
    ports = _port_sentence(rng, names, sequential)
    width = rng.choice(_WIDTHS)
    noun = rng.choice(("module", "circuit", "design", "block", "top module", "component", "unit"))
    lead = phrase(rng, (
        f"This {noun} is a {width}-bit {'register' if sequential else 'combinational block'}: {behaviour}.",
        f"This {noun} works as follows: {behaviour}.", f"Build a circuit where {behaviour}.",
        f"Create a {width}-bit {'counter' if sequential else 'circuit'} in which {behaviour}.",
        f"The {noun} should behave like this: {behaviour}.", f"{behaviour[0].upper()}{behaviour[1:]}.",
        f"Make a {noun} so that {behaviour}.", f"In this {noun}, {behaviour}.",
        f"Implement a {noun} where {behaviour}.", f"A {width}-bit {noun}: {behaviour}.",
    ))  # fmt: skip
    sentences = [lead, ports, f"Also, {more}." if more and more != behaviour else ""]
    if rng.random() < 0.3:
        sentences.insert(0, sentences.pop(1))
    if rng.random() < 0.3:  # long specs: background first, then several behaviours, one per sentence
        part = rng.choice(HARDWARE_PARTS)[0]
        sentences.insert(0, f"{part[0].upper()}{part[1:]} is often used in {rng.choice(_HW_CONTEXTS)}.")
        for _ in range(rng.randint(2, 4)):
            extra = _behaviour(rng, names, sequential)
            sentences.append(f"{rng.choice(_CONNECTIVES)}{extra}.")
    return {"text": dress(rng, " ".join(s[:1].upper() + s[1:] for s in sentences if s))}


_HW_CONTEXTS = ("serial links", "CPU pipelines", "display drivers", "memory controllers", "signal processing",
                "embedded controllers", "network switches", "audio codecs", "timers and watchdogs")  # fmt: skip
_CONNECTIVES = ("", "In addition, ", "Note that ", "When that is not the case, ", "Separately, ", "Finally, ")


# A function or program specified by what it takes and gives, with no "write": the reply is code.
FUNCTION_SPECS = (
    ("a list of integers", "the sum of the even numbers"), ("a string", "the string with its words in reverse order"),
    ("two sorted arrays", "a single sorted array with all their elements"), ("a binary tree", "its maximum depth"),
    ("a list of intervals", "the list with overlapping intervals merged"), ("a sentence", "the longest word"),
    ("an integer n", "the n-th Fibonacci number"), ("a list of words", "a dictionary mapping each word to its count"),
    ("a matrix", "its transpose"), ("a linked list", "the list reversed"), ("a date string", "the day of the week"),
    ("a path to a text file", "the number of lines that contain a given word"), ("a list of employee records", "the records sorted by salary, highest first"),
    ("two strings", "whether one is an anagram of the other"), ("a nested list", "a flat list of its elements"),
    ("a URL", "its domain name"), ("an array of prices", "the best profit from one buy and one sell"),
    ("a number", "its digits in reverse order"), ("a list of records", "the records grouped by their category field"),
    ("a directory path", "the total size of the files under it"), ("a string of brackets", "whether it is balanced"),
    ("a hash of names to ages", "the names sorted by age"), ("a grid of 0s and 1s", "the number of islands"),
    ("a list", "the list without duplicates, in the original order"), ("an array and a target", "the indices of two elements that add up to the target"),
)  # fmt: skip


def _function_spec(rng: random.Random, corpus: Corpus) -> dict:
    given, gives = rng.choice(FUNCTION_SPECS)
    lang = rng.choice(CODE_LANGS)
    name = rng.choice(("solve", "process", "compute", "transform", "helper", "main", "run"))
    ask = phrase(rng, (
        f"This function takes {given} and returns {gives}.", f"Given {given}, return {gives}.",
        f"The program reads {given} from standard input and prints {gives}.", f"Function {name}: input {given}, output {gives}.",
        f"{name}() should accept {given} and return {gives}. {lang}.", f"Input: {given}. Output: {gives}.",
        f"A {lang} method that receives {given} and outputs {gives}.", f"Take {given} and produce {gives}, in {lang}.",
        f"Complete the function {name} so that, given {given}, it returns {gives}.",
        f"The script gets {given} as an argument and outputs {gives}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# Short programming asks as forum and FAQ readers write them: often no language named, sometimes
# a bare imperative ("Reverse a string"). The object is a program's data (list, hash, file ...).
PLAIN_TASKS = HOWTO_TASKS + (
    "get the last item of a list", "count the occurrences of each character in a string", "parse an XML file",
    "convert a list of strings to integers", "strip whitespace from both ends of a string", "append a line to a file",
    "check whether a string contains a substring", "get the current time in milliseconds", "read a binary file into a byte array",
    "turn a list into a comma-separated string", "remove a key from a dictionary", "get the size of a file",
    "find all files matching a pattern", "print to standard error", "compare two lists element by element",
    "send a POST request with a JSON body", "read a gzip-compressed file", "convert a Unix timestamp to a date",
    "serialize an object to a file", "compute the MD5 checksum of a file", "list the running processes",
    "download a file over HTTPS", "base64-encode a string", "transpose a matrix", "generate all permutations of a list",
    "remove non-ASCII characters from a string", "convert a hex string to bytes", "get the file extension from a path",
    "limit the number of concurrent tasks", "catch every exception a block raises", "find the maximum value in a map",
    "sum a column of numbers in a text file", "wait for a child process to finish", "create a temporary directory",
)  # fmt: skip


def _howto_plain(rng: random.Random, corpus: Corpus) -> dict:
    task = rng.choice(PLAIN_TASKS)
    lang = rng.choice(CODE_LANGS)
    ask = phrase(rng, (
        *howto_voices(task), f"{task[0].upper()}{task[1:]}.", f"{task[0].upper()}{task[1:]} in {lang}",
        f"How do you {task} in {lang}?", f"Need to {task}. How?", f"{lang}: {task}", f"How do I {task} without a loop?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _write_and_explain(rng: random.Random, corpus: Corpus) -> dict:
    """Code asks that also want an explanation: the reply is still mostly code."""
    algo, lang, task = rng.choice(ALGORITHMS), rng.choice(CODE_LANGS), rng.choice(SHELL_TASKS)
    ask = phrase(rng, (
        f"Write code for {algo} and explain how to use it.", f"Implement {algo} in {lang}, then explain each step.",
        f"Give me a script to {task} and walk me through how it works.", f"Write a {lang} program for {algo}; explain the approach briefly.",
        f"Code {algo} and describe how it works.", f"Write a script that can {task}, and explain how to run it.",
        f"Show me {lang} code for {algo} with an explanation of the tricky parts.",
        f"Write a function for {algo} and explain its time complexity.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# Data-wrangling asks on a data frame the reply cannot see (a variable such as `df`, "my DataFrame",
# a tibble): only code can answer them, even when phrased as a question ("Which region in df has
# the highest mean sales?"). Schemas and operations were written for this template; no corpus text.
# (table, key, category, number, time, another column)
FRAME_SCHEMAS = (
    ("orders", "order_id", "region", "amount", "order_date", "customer_id"),
    ("employees", "employee_id", "department", "salary", "hire_date", "manager"),
    ("weather", "station", "city", "rainfall_mm", "date", "wind_kmh"),
    ("students", "student", "school", "score", "exam_date", "age"),
    ("prices", "ticker", "sector", "close", "date", "volume"),
    ("visits", "user_id", "country", "duration_s", "timestamp", "url"),
    ("trips", "trip_id", "zone", "fare", "pickup_time", "passengers"),
    ("products", "sku", "category", "price", "added_on", "supplier"),
    ("patients", "patient_id", "ward", "weight_kg", "admitted", "diagnosis"),
    ("songs", "title", "genre", "plays", "released", "artist"),
)  # fmt: skip
FRAME_LIBRARIES = ("pandas", "pandas", "pandas", "polars", "dplyr", "PySpark", "data.table")


def _frame_operation(rng: random.Random, schema: tuple[str, ...], other: str) -> str:
    _, key, cat, num, when, extra = schema
    n = rng.choice((3, 5, 10, 20))
    return rng.choice((
        f"group by {cat} and compute the mean of {num}", f"drop the rows where {num} is missing",
        f"fill missing values in {num} with the column median", f"keep only the rows where {num} is above {rng.randint(2, 900)}",
        f"sort by {num} descending and keep the top {n} rows", f"merge it with {other} on {key}, keeping every row of the left one",
        f"pivot it so that each {cat} becomes a column", f"reshape it from wide to long format",
        f"count how many distinct {key} values there are", f"get the value counts of {cat} as percentages",
        f"add a column ratio equal to {num} divided by its group total per {cat}", f"convert {when} to datetime and extract the month",
        f"rename {num} to {num}_total and drop {extra}", f"remove duplicate rows, keeping the last one per {key}",
        f"compute the cumulative sum of {num} within each {cat}", f"compute the percentage change of {num} from row to row",
        f"bin {num} into {n} equal-width buckets", f"one-hot encode {cat}", f"compute the correlation matrix of the numeric columns",
        f"resample to monthly totals of {num}", f"find the {cat} with the highest total {num}", f"rank the rows by {num} within each {cat}",
        f"select only the numeric columns", f"replace the values of {cat} using a mapping dictionary", f"split {key} into two columns on the first dash",
        f"keep the rows whose {cat} contains the word 'north', ignoring case", f"compute a {n}-period rolling average of {num}",
        f"set {key} as the index and sort by it", f"plot a histogram of {num}", f"normalize {num} to the range 0 to 1",
        f"find the rows where {num} is more than three standard deviations from the mean", f"sample {n} percent of the rows at random",
    ))  # fmt: skip


def _dataframe_ops(rng: random.Random, corpus: Corpus) -> dict:
    schema = rng.choice(FRAME_SCHEMAS)
    table, cols = schema[0], schema[1:]
    op = _frame_operation(rng, schema, rng.choice(("df2", "lookup", "the customers frame", f"{table}_meta")))
    name = rng.choice(("df", "df", "data", f"{table}", f"{table}_df", f"df_{table}"))
    lib = rng.choice(FRAME_LIBRARIES)
    columns = ", ".join(cols[: rng.randint(3, len(cols))])
    obj = rng.choice((f"`{name}`", name, f"the DataFrame {name}", f"my {lib} dataframe", "the data frame", f"a {table} DataFrame"))
    ask = phrase(rng, (
        f"{op[0].upper()}{op[1:]} in {obj}.", f"Using {lib}, {op}.", f"How do I {op} in {lib}?", f"{name}: {op}",
        f"Given a DataFrame {name} with columns {columns}, {op}.", f"I have {obj} with columns {columns}. How can I {op}?",
        f"In {lib}, what's the idiomatic way to {op}?", f"Write one line of {lib} that will {op}.",
        f"{op[0].upper()}{op[1:]}. The frame is called {name} and has the columns {columns}. Store the result in result.",
        f"Take {obj} and {op}; return the resulting frame.", f"Can you {op} for {obj}? I'm using {lib}.",
        f"{name} has columns {columns}. {op[0].upper()}{op[1:]}.",
    ))  # fmt: skip
    if rng.random() < 0.2:  # a df.head() as users paste it: columns aligned, an index, a few rows
        rows = [f"{i:<3}" + "  ".join(f"{rng.randint(1, 999):>8}" for _ in cols[:4]) for i in range(rng.randint(2, 5))]
        head = "   " + "  ".join(f"{c:>8}" for c in cols[:4]) + "\n" + "\n".join(rows)
        return {"text": dress(rng, around(rng, ask, head))}
    return {"text": dress(rng, ask)}


# Asks about data the user holds and names without pasting it ("the bike rental records", "our
# survey spreadsheet"): a first-person goal, a question about its groups, an imperative, a chart.
# Only code that reads the data can answer, even with no library, no `df` and no programming word.
# (data set, what a row is, a category column, a number column, a date column, a text column, a second table)
HELD_DATA = (
    ("the bike rental records", "rentals", "station", "trip duration", "start time", "bike type", "the stations list"),
    ("our survey spreadsheet", "respondents", "age group", "satisfaction score", "response date", "comment", "the panel sheet"),
    ("the sensor readings", "readings", "sensor", "temperature", "timestamp", "location name", "the sensor inventory"),
    ("the flight delays file", "flights", "airline", "delay in minutes", "departure date", "destination", "the airports table"),
    ("the library loans table", "loans", "branch", "loan length", "checkout date", "book title", "the members table"),
    ("my sales export", "orders", "region", "order value", "order date", "product name", "the customers table"),
    ("the match results", "matches", "team", "goals scored", "match date", "venue", "the teams table"),
    ("the energy meter log", "measurements", "building", "kWh used", "reading time", "meter id", "the buildings table"),
    ("the grades spreadsheet", "students", "class", "final mark", "exam date", "student name", "the classes sheet"),
    ("the support tickets data", "tickets", "priority", "hours to close", "opened at", "subject line", "the agents table"),
    ("the hospital visits data", "visits", "department", "waiting time", "visit date", "diagnosis code", "the departments list"),
    ("our web analytics export", "sessions", "country", "pages viewed", "session start", "landing page", "the campaigns table"),
)  # fmt: skip


def _held_data_task(rng: random.Random, row: tuple[str, ...]) -> tuple[str, str]:
    """(goal phrase after "I want to", the same as a question or imperative)."""
    data, rows, cat, num, when, text, other = row
    n = rng.choice((3, 5, 10))
    return rng.choice((
        (f"see only the {rows} where {num} is above {rng.randint(5, 500)}", f"Show only the {rows} in {data} where {num} is above {rng.randint(5, 500)}."),
        (f"know the average {num} for each {cat}", f"What is the average {num} for each {cat} in {data}?"),
        (f"count the {rows} per {cat}", f"How many {rows} are there per {cat} in {data}?"),
        (f"find which {cat} has the highest total {num}", f"Which {cat} has the highest total {num} in {data}?"),
        (f"compare the {num} of each {cat} in a bar chart", f"Make a bar chart of the mean {num} per {cat} from {data}."),
        (f"see how {num} changes over time", f"Plot {num} against {when} for {data}, one line per {cat}."),
        (f"look at the distribution of {num}", f"Draw a histogram of {num} from {data}."),
        (f"keep just the {when} and {num} columns", f"Select only the {when} and {num} columns of {data}."),
        (f"turn {when} into proper dates and keep the last month", f"Convert {when} in {data} to dates and keep the last month."),
        (f"add a column with {num} as a share of the {cat} total", f"Add a column to {data} with each row's {num} divided by its {cat} total."),
        (f"clean up {text} so it is all lower case without spaces at the ends", f"Make every {text} in {data} lower case and strip the spaces."),
        (f"bring in the details from {other}", f"Join {other} onto {data} by {cat}."),
        (f"know how many values of {num} are missing", f"How many {rows} in {data} have no {num}?"),
        (f"get summary statistics of {num} by {cat}", f"Give the minimum, median and maximum {num} per {cat} in {data}."),
        (f"find the top {n} {rows} by {num}", f"List the {n} {rows} with the largest {num} in {data}."),
        (f"split {text} into its first word and the rest", f"Split {text} in {data} into the first word and the remainder."),
        (f"have the monthly totals of {num}", f"What is the total {num} per month in {data}?"),
        (f"drop the duplicated {rows}", f"Remove the duplicate {rows} from {data}."),
    ))  # fmt: skip


def _held_data(rng: random.Random, corpus: Corpus) -> dict:
    row = rng.choice(HELD_DATA)
    data = row[0]
    goal, direct = _held_data_task(rng, row)
    ask = phrase(rng, (
        f"I want to {goal}.", f"I'd like to {goal} in {data}.", f"I'm interested in a way to {goal} from {data}.",
        f"My goal: {goal}, using {data}.", f"We need to {goal}; everything is in {data}.", direct,
        f"{direct} I already have it loaded.", f"I have {data}. I want to {goal}.", f"For {data}, I need to {goal}.",
        f"Working with {data} — {direct[0].lower()}{direct[1:]}", f"Is there a quick way to {goal} in {data}?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


# How to make an interactive shell behave some way: the reply is the lines to put in its startup file
# (options, key bindings, prompt escapes, functions), so code, although the ask names no program and
# reads like a question about a tool (the twin `prose/tooling_question`). Settings written for this
# template, none of the Zsh FAQ's.
SHELL_SETTINGS = (
    "show the current git branch in my prompt", "make the up arrow search history for what I've already typed",
    "keep duplicate commands out of my history", "share history between terminal windows",
    "make tab completion ignore case", "show the exit status of the last command in my prompt",
    "make cd with no arguments go to my projects folder", "define an alias that takes an argument",
    "stop the shell from beeping at me", "print how long a slow command took",
    "load extra settings only on my work machine", "add a directory to PATH only if it isn't there yet",
    "make ** match files in every subdirectory", "turn on vi key bindings on the command line",
    "change into a directory just by typing its name", "run a command every time I change directory",
    "show the time on the right side of the prompt", "remember the last 50,000 commands",
    "make Ctrl-D not close the shell", "get told when a background job finishes",
    "make one of my functions available in every new shell", "set a default umask for new files",
    "make a glob that matches nothing expand to nothing", "shorten long directory paths in the prompt",
)  # fmt: skip
SHELLS = ("bash", "zsh", "fish", "ksh", "Bash", "Zsh")


def _shell_setting(rng: random.Random, corpus: Corpus) -> dict:
    setting, shell = rng.choice(SHELL_SETTINGS), rng.choice(SHELLS)
    ask = phrase(rng, (
        *howto_voices(setting), f"How do I {setting} in {shell}?", f"How can I get {shell} to {setting}?",
        f"In my .{shell.lower()}rc, how do I {setting}?", f"What do I put in my shell config to {setting}?",
        f"{shell}: {setting}?",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


SYSTEM_GENERIC = (
    "You are a helpful assistant.", "You are ChatGPT, a large language model.", "Be helpful and accurate.",
    "You are a friendly assistant for a small company.", "Answer the user's questions.",
)  # fmt: skip


# A change to a codebase asked of a coding assistant without a system prompt or pasted code ("Port the
# cron jobs to systemd timers", "Fix the failing test in tests/test_cli.py"): the reply is the patch.
# The templates' code asks all named a language or showed code, so these short tasks about a project
# read prose or (on file and config names) structured: a probe of my own (check set AB) had 7 of 20
# wrong. Tasks written for this template; none of AB's.
REPO_TASKS = (
    "Port the cron jobs in deploy/ to systemd timers", "Add a --dry-run option to the sync command",
    "Make the image resizer keep the EXIF orientation", "Replace moment.js with date-fns in the frontend",
    "Add rate limiting to the public API, 100 requests a minute per key", "Fix the off-by-one error in the pager",
    "Add OpenTelemetry tracing to the checkout service", "Turn the config loader into a dataclass",
    "Make the scheduler skip holidays", "Add an index on orders.created_at and a migration for it",
    "Stop the worker from crashing when the queue is empty", "Add CSV export to the reports page",
    "Upgrade the project to Python 3.12 and fix what breaks", "Replace the global variables in app.js with a module",
    "Add end-to-end tests for the password reset flow", "Make the search box debounce its requests",
    "Move the email templates out of the code into files", "Add a Makefile with build, test and lint targets",
    "Fix the memory leak in the websocket handler", "Add a CHANGELOG entry check to CI",
    "Make the downloader resume interrupted downloads", "Swap the SQLite database for Postgres in production",
    "Refactor the 400-line handle_request into smaller functions", "Add i18n to the navbar labels",
    "Remove the jQuery dependency from the admin pages", "Make the CLI print errors to stderr, not stdout",
    "Add a /metrics endpoint for Prometheus", "Convert the class components in src/components to hooks",
    "Fix the race condition when two users edit the same document", "Add a retry to the flaky payment webhook",
    "Generate the API client from the OpenAPI spec instead of writing it by hand",
    "Make the test suite run in parallel", "Add a feature flag around the new onboarding screen",
    "Strip trailing whitespace in the importer before parsing", "Make the uploader reject files over 20 MB",
    "Replace the print statements with the logging module", "Add a Dockerfile and a docker-compose file for local dev",
    "Bump the minimum Node version to 20 and drop the polyfills", "Make the sitemap generator include blog posts",
    "Fix the broken link checker so it follows redirects", "Add pagination to the admin user list",
    "Speed up the nightly report job", "Add a cancel button to the long-running export",
    "Wire the new billing service into the signup flow", "Make the mobile menu close when a link is tapped",
    "Add unit tests for the tax rules in pricing/", "Make the settings page save without a full reload",
)  # fmt: skip


def _repo_task(rng: random.Random, corpus: Corpus) -> dict:
    task = rng.choice(REPO_TASKS)
    lower = task[0].lower() + task[1:]
    ask = phrase(rng, (
        f"{task}.", f"Can you {lower}?", f"Please {lower}.", f"In our repo: {lower}.", f"Task: {lower}.",
        f"Next up: {lower}.", f"{task}, and keep the existing tests passing.", f"We need to {lower}.",
        f"I'd like you to {lower}.", f"{task}. Show me the diff.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


TEMPLATES: tuple[Template, ...] = (
    Template("code/write_function", "code", _write_function, 130),
    Template("code/algorithm", "code", _implement_algorithm, 90),
    Template("code/howto", "code", _howto, 90),
    Template("code/fix_bug", "code", _fix_bug, 110),
    Template("code/refactor", "code", _refactor, 80),
    Template("code/translate_code", "code", _translate_code, 80),
    Template("code/unit_tests", "code", _unit_tests, 60),
    Template("code/complete", "code", _complete_code, 60),
    Template("code/shell", "code", _shell, 60),
    Template("code/web_ui", "code", _web_ui, 50),
    Template("code/parse_data_script", "code", _parse_data_script, 70),
    Template("code/json_handling", "code", _json_handling_code, 50),
    Template("code/sql_to_code", "code", _sql_to_code, 50),
    Template("code/traceback", "code", _traceback, 60),
    Template("code/regex", "code", _regex, 40),
    Template("code/followup", "code", _followup_code, 60),
    Template("code/system_coder", "code", _system_coder, 60),
    Template("code/multilingual", "code", _multilingual_code, 50),
    Template("code/multilingual_fix", "code", _multilingual_fix, 40),
    Template("code/hardware", "code", _hardware, 60),
    Template("code/hardware_spec", "code", _hardware_spec, 150),
    Template("code/function_spec", "code", _function_spec, 80),
    Template("code/howto_plain", "code", _howto_plain, 100),
    Template("code/write_and_explain", "code", _write_and_explain, 60),
    Template("code/dataframe_ops", "code", _dataframe_ops, 120),
    Template("code/held_data", "code", _held_data, 120),
    Template("code/repo_task", "code", _repo_task, 100),
    Template("code/shell_setting", "code", _shell_setting, 40),
)


def few_shot_prompts(corpus: Corpus) -> list[tuple[str, str, dict]]:
    """Real prompts from bigcode-eval's few-shot files (Apache-2.0): (label, group, prompt)."""
    out = []
    for index, question in enumerate(corpus.few_shot.get("gsm8k", [])):
        out.append(("prose", f"gsm8k:{index}", {"text": question}))
    for name in ("conala", "concode"):
        for index, instruction in enumerate(corpus.few_shot.get(name, [])):
            out.append(("code", f"{name}:{index}", {"text": instruction.strip()}))
    return out


def verilog_prompts(rng: random.Random, corpus: Corpus) -> list[tuple[str, dict]]:
    """Real third-party task descriptions (VerilogEval, Apache-2.0): group key = task id."""
    out = []
    for task in corpus.verilog_tasks:
        for key in ("detail_description", "simple_description"):
            description = (task.get(key) or "").strip()
            if not description:
                continue
            wrapper = rng.random()
            if wrapper < 0.5:
                text = description
            elif wrapper < 0.8:
                text = f"{description}\n\nImplement this module in Verilog."
            else:
                text = f"Write a Verilog module for the following.\n{description}"
            out.append((f"verilog:{task['task_id']}", {"text": text}))
    return out
