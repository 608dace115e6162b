"""The fixed training text of the test tokenizer.

It ships with the code (not read from the interpreter's stdlib, which changes between Python
versions) so the tokenizer, and every checkpoint built on it, is identical on every machine.
It mixes English prose, Python, JSON, YAML, CSV, SQL, shell, numbers, whitespace runs and a
little non-Latin text so the merges cover what the tests feed the model.
"""

from __future__ import annotations

PROSE = """\
The river ran quietly past the old mill, where the miller's daughter sat reading by the window.
She had read the same page three times, because her thoughts kept wandering to the letter that
had arrived that morning. It was short, and it said nothing she had not expected; still, she
could not put it down. "We shall see," she said at last, to nobody in particular.

In the evening the wind rose, and the rain came in long grey sheets across the fields. The
travellers who reached the inn were wet through, and they crowded around the fire, talking of
roads, of prices, of the weather, and of the war that everyone agreed would not come.

Good documentation explains why a system behaves as it does, not only what it does. A reader
who understands the reasons can predict the behaviour in situations the author never described.
That is the difference between a manual and a collection of recipes: the first one teaches.

It is a truth universally acknowledged that a test which cannot fail tells you nothing. When the
numbers look too good, check the measurement before you celebrate the result.

Questions? Answers! Well... maybe -- or perhaps not; it's hard to say (isn't it?).
Dr. Smith's lab measured 3.14159 volts at 12:45 on 2024-03-17; the error was +/- 0.5%.
"""

PYTHON = '''\
import json
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class Request:
    """One queued request and the tokens produced for it so far."""

    prompt: str
    max_tokens: int = 128
    tokens: list[int] = field(default_factory=list)

    def remaining(self) -> int:
        return max(0, self.max_tokens - len(self.tokens))


def read_records(path: str) -> Iterator[dict]:
    with open(path, "r", encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_number}: {exc}") from exc


class Counter:
    def __init__(self):
        self.counts = {}

    def add(self, key, value=1):
        self.counts[key] = self.counts.get(key, 0) + value
        return self.counts[key]


if __name__ == "__main__":
    for i in range(10):
        print(i, i * i, i ** 3, hex(i))
'''

JSON_TEXT = """\
{
  "id": "chatcmpl-42",
  "object": "chat.completion",
  "created": 1731600000,
  "model": "switchyard-demo",
  "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Hello, world!"}, "finish_reason": "stop"}
  ],
  "usage": {"prompt_tokens": 17, "completion_tokens": 5, "total_tokens": 22},
  "tags": ["alpha", "beta", "gamma"],
  "enabled": true,
  "ratio": 0.875,
  "parent": null
}
"""

YAML_TEXT = """\
server:
  host: 127.0.0.1
  port: 8000
  workers: 1
engines:
  - name: raw
    enabled: true
  - name: mtp
    enabled: true
    draft_tokens: 1
routing:
  exploration: 0.05
  overrides:
    code: ddtree
    prose: raw
"""

CSV_TEXT = """\
id,name,city,score,joined
1,Alice,Paris,91.5,2021-04-01
2,Bob,Berlin,78.0,2020-11-23
3,Chen,Shanghai,88.25,2022-01-09
4,Dana,New York,67.75,2019-07-30
5,Emil,Oslo,73.0,2023-02-14
"""

SQL_TEXT = """\
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    name VARCHAR(64) NOT NULL,
    email TEXT UNIQUE,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);

SELECT u.name, COUNT(o.id) AS orders, SUM(o.total) AS revenue
FROM users AS u
LEFT JOIN orders AS o ON o.user_id = u.id
WHERE u.created_at >= '2024-01-01'
GROUP BY u.name
HAVING COUNT(o.id) > 2
ORDER BY revenue DESC
LIMIT 10;
"""

SHELL_AND_MISC = """\
$ pip install --upgrade switchyard && switchyard serve --port 8000
$ curl -s http://127.0.0.1:8000/health | jq .
<div class="note"><p>Tabs\tand  spaces   and\r\nline endings.</p></div>
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 1024 65536 3.5e-7 -12 +7 1,000,000
Unicode: café naïve résumé Ångström Straße Ελληνικά русский текст
中文文本测试，你好世界。日本語のテキスト。한국어 텍스트 ✓ → ★ € £ ¥ 😀
"""

CORPUS: str = "\n".join([PROSE, PYTHON, JSON_TEXT, YAML_TEXT, CSV_TEXT, SQL_TEXT, SHELL_AND_MISC])
