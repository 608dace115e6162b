"""Templates whose expected reply is structured output: JSON, YAML, CSV, SQL, XML, config, tables."""

from __future__ import annotations

import random
import re

from classifier.dataset.common import EVERYDAY_TOPICS, Template, around, clip, dress, phrase
from classifier.dataset.corpus import Corpus, Table, table_csv
from classifier.dataset.templates_code import SYSTEM_GENERIC

FORMATS = ("JSON", "YAML", "CSV", "XML", "a markdown table", "TOML")


def _create_table_sql(table: Table, rng: random.Random) -> str:
    def sql_type(values: list[str]) -> str:
        if all(re.fullmatch(r"-?\d+", v or "0") for v in values):
            return "INTEGER"
        if all(re.fullmatch(r"-?[\d.]+(e-?\d+)?", v or "0") for v in values):
            return rng.choice(("REAL", "NUMERIC", "DOUBLE PRECISION"))
        return rng.choice(("TEXT", "VARCHAR(255)"))

    columns = []
    for i, name in enumerate(table.header):
        values = [row[i] for row in table.rows if i < len(row)]
        columns.append(f"  {re.sub(r'[^a-z0-9_]', '_', name.lower())} {sql_type(values)}")
    return f"CREATE TABLE {table.name} (\n" + ",\n".join(columns) + "\n);"


def _columns(table: Table) -> list[str]:
    return [re.sub(r"[^a-z0-9_]", "_", h.lower()) for h in table.header]


def _sql_query(rng: random.Random, corpus: Corpus) -> dict:
    table = rng.choice(corpus.tables)
    cols = _columns(table)
    a, b = rng.sample(cols[1:] if len(cols) > 2 else cols, 2) if len(cols) > 2 else (cols[0], cols[-1])
    ask = phrase(rng, (
        f"Write a SQL query that returns the average {a} for each {b}.", f"SQL to get the top 5 rows by {a}?",
        f"Give me a query counting rows per {b}, highest first.", f"Write an SQL query to find rows where {a} is above the mean.",
        f"Query for the distinct values of {b} and how often each appears.", f"Write a window-function query ranking rows by {a} within {b}.",
        f"Write a Postgres query that deletes duplicate rows based on {a} and {b}.",
    ))  # fmt: skip
    schema = _create_table_sql(table, rng) if rng.random() < 0.7 else f"table {table.name}({', '.join(cols)})"
    return {"text": dress(rng, around(rng, ask, schema, "sql"))}


def _optimise_sql(rng: random.Random, corpus: Corpus) -> dict:
    query = clip(rng, rng.choice(corpus.sql), 60, 800)
    ask = phrase(rng, (
        "Optimise this query. Return only the SQL.", "Rewrite this query to use a CTE.", "Convert this to MySQL syntax.",
        "Fix the syntax error in this SQL.", "Rewrite this query without the subquery.", "Add an index-friendly WHERE clause and return the query.",
        "Format this SQL nicely.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, query, "sql"))}


def _csv_to_other(rng: random.Random, corpus: Corpus) -> dict:
    table = rng.choice(corpus.tables)
    data = table_csv(table, rng.randint(3, 10))
    target = rng.choice(("JSON", "a JSON array of objects", "YAML", "XML", "a markdown table", "JSON Lines"))
    ask = phrase(rng, (f"Convert this CSV to {target}.", f"Turn the following into {target}.", f"{target} please:",
                      f"Can you reformat this data as {target}?", f"Transform to {target}, keep all columns."))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, data, "csv"))}


def _json_to_other(rng: random.Random, corpus: Corpus) -> dict:
    doc = clip(rng, rng.choice(corpus.json_docs), 100, 1000)
    ask = phrase(rng, (
        "Convert this JSON to YAML.", "Turn this into XML.", "Flatten this JSON into CSV.", "Write a JSON Schema for this object.",
        "Minify this JSON.", "Rename all keys to camelCase and return the JSON.", "Add a \"created_at\" field to every object and return the result.",
        "Fix this JSON so it's valid.", "Sort the keys alphabetically.", "Convert to TOML.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, doc, "json"))}


def _broken_json(rng: random.Random, corpus: Corpus) -> dict:
    doc = clip(rng, rng.choice(corpus.json_docs), 80, 700)
    broken = doc.replace(",", "", 1) if rng.random() < 0.5 else doc.replace('"', "'", 4)
    ask = phrase(rng, ("This JSON doesn't parse. Return the corrected JSON.", "Fix the JSON:", "json.loads fails on this, can you repair it?",
                      "Validate this and output the valid version only."))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, broken, "json"))}


def _yaml_edit(rng: random.Random, corpus: Corpus) -> dict:
    doc = rng.choice(corpus.yaml_docs)
    ask = phrase(rng, (
        "Convert this YAML to JSON.", "Add a handler that restarts nginx and return the full YAML.",
        "Fix the indentation of this YAML.", "Add a `tags: [setup]` key to every task and give me the YAML back.",
        "Change the become user to deploy and output the updated file.", "Convert this YAML into a TOML file.",
        "Merge these settings with `debug: true` and return valid YAML.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, doc, "yaml"))}


def _xml_edit(rng: random.Random, corpus: Corpus) -> dict:
    doc = rng.choice(corpus.xml_docs)
    ask = phrase(rng, (
        "Convert this XML to JSON.", "Add a <release-date> element and return the XML.", "Write an XSD for this XML.",
        "Pretty-print this XML.", "Extract all the names as a CSV list.", "Turn this into YAML.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, doc, "xml"))}


def _extract_json(rng: random.Random, corpus: Corpus) -> dict:
    """Pasted prose, but the ask is for extracted fields: the reply is structured."""
    passage = clip(rng, rng.choice(corpus.tech_prose + corpus.literary_prose), 150, 1000)
    fields = rng.sample(("title", "summary", "keywords", "entities", "people", "dates", "sentiment", "topics", "language", "category"), 3)
    ask = phrase(rng, (
        f"Extract {', '.join(fields)} from this text as JSON.", f"Return a JSON object with keys {fields} for the passage below.",
        f"Give me the named entities in this text as a JSON array.", "List the key facts from this paragraph as YAML.",
        f"Fill this schema from the text: {{\"{fields[0]}\": ..., \"{fields[1]}\": ..., \"{fields[2]}\": ...}}",
        "Make a table (markdown) of the main claims in this text and their evidence.",
        "Output only JSON: {\"summary\": string, \"keywords\": [string]}", "Turn this into a CSV with one row per sentence and a column for its topic.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, passage))}


def _classify_json(rng: random.Random, corpus: Corpus) -> dict:
    text = clip(rng, rng.choice(corpus.quotes + corpus.tech_prose), 60, 500)
    ask = phrase(rng, (
        'Classify the sentiment of this text. Respond with JSON like {"sentiment": "positive|negative|neutral", "confidence": 0-1}.',
        "Label this text with one of [tech, humour, literature, other]. Output JSON only.",
        'Return {"is_question": bool, "language": str} for the following input.',
        "Score this text for toxicity, formality and clarity (0-10 each) as a JSON object.",
        "Tag this text: output a YAML list of tags.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, text))}


def _generate_sample_data(rng: random.Random, corpus: Corpus) -> dict:
    table = rng.choice(corpus.tables)
    cols = ", ".join(table.header)
    n = rng.choice((5, 10, 12, 20, 50))
    fmt = rng.choice(("CSV", "JSON", "a JSON array", "YAML", "SQL INSERT statements", "a markdown table", "XML"))
    ask = phrase(rng, (
        f"Generate {n} rows of realistic fake data with columns {cols} as {fmt}.", f"Make up {n} sample records ({cols}). Output {fmt}.",
        f"I need test fixtures: {n} entries with fields {cols}, formatted as {fmt}.", f"Create mock data for a table {table.name}({cols}) in {fmt}.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _config_file(rng: random.Random, corpus: Corpus) -> dict:
    what = rng.choice((
        "an nginx server block that proxies /api to localhost:3000 and serves static files from /srv/www",
        "a docker-compose.yml with postgres, redis and a web app", "a Kubernetes Deployment and Service for an app on port 8080",
        "a GitHub Actions workflow that runs pytest on push", "a systemd unit file for a Python web service",
        "an Ansible playbook that installs and starts nginx", "a .gitlab-ci.yml with build, test and deploy stages",
        "a Prometheus scrape config for three targets", "a redis.conf tuned for a cache with 2GB of memory",
        "a logrotate config for /var/log/myapp/*.log", "an Apache virtual host with HTTPS", "a pyproject.toml for a small library",
        "a .editorconfig for a mixed Python/JS repo", "a Terraform variables file for three environments", "a Helm values.yaml for a web app",
        "an OpenAPI spec for a todo API", "a package.json with lint and test scripts", "a crontab that runs backups at 2am",
        "an Alertmanager config routing critical alerts to PagerDuty", "a launchd plist that keeps a daemon running",
    ))  # fmt: skip
    ask = phrase(rng, (f"Write {what}.", f"Give me {what}.", f"Can you generate {what}?", f"I need {what}, config only.", f"Create {what}."))
    return {"text": dress(rng, ask)}


def _edit_config(rng: random.Random, corpus: Corpus) -> dict:
    kind, text = rng.choice(corpus.configs)
    ask = phrase(rng, (
        "Change the port to 8080 and return the whole config.", "Disable logging in this config and give me the updated file.",
        "Add a comment-free version of this config.", f"Update this {kind} config to listen only on localhost.",
        "Convert this config to YAML.", "Sort these settings and output the config.",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, text))}


def _markdown_table(rng: random.Random, corpus: Corpus) -> dict:
    items = rng.sample(EVERYDAY_TOPICS, 3)
    ask = phrase(rng, (
        f"Make a table comparing {', '.join(items)} by cost, popularity and impact.",
        f"Create a markdown table of pros and cons for {items[0]}.", f"Tabulate the key dates of {items[1]}.",
        f"Give me a comparison table (columns: name, year, why it matters) for {', '.join(items)}.",
        "Put the planets of the solar system in a table with their diameter and number of moons.",
        f"List the top 10 facts about {items[2]} as a two-column table.",
    ))  # fmt: skip
    return {"text": dress(rng, ask)}


def _json_api_answer(rng: random.Random, corpus: Corpus) -> dict:
    system = phrase(rng, (
        "You are an API. Always respond with a single JSON object and nothing else.",
        "Reply only with valid JSON matching the schema {\"answer\": string, \"sources\": [string]}.",
        "You output YAML only. No prose.", "Respond in JSON. Keys: intent, entities, reply.",
        "You are a data extraction service. Output CSV with a header row.",
    ))  # fmt: skip
    user = phrase(rng, (
        f"What is {rng.choice(EVERYDAY_TOPICS)}?", f"Book a table for {rng.randint(2, 8)} people tomorrow at 7pm.",
        f"Tell me about {rng.choice(corpus.topics)}.", rng.choice(corpus.quotes), "What's the weather like in Paris?",
        f"Summarise: {clip(rng, rng.choice(corpus.tech_prose), 100, 500)}",
    ))  # fmt: skip
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def _followup_structured(rng: random.Random, corpus: Corpus) -> dict:
    """Multi-turn: earlier turns are prose, the last ask wants the content in a structured format."""
    topic = rng.choice(EVERYDAY_TOPICS)
    messages = [
        {"role": "user", "content": rng.choice((f"Tell me about {topic}.", f"What are the main facts about {topic}?", f"Explain {topic}."))},
        {"role": "assistant", "content": clip(rng, rng.choice(corpus.tech_prose + corpus.literary_prose), 150, 600)},
        {"role": "user", "content": dress(rng, phrase(rng, (
            "Now put that in a table.", "Can you give me that as JSON?", "Turn the key points into a YAML list.",
            "Export that as CSV with columns point, detail.", "great, same thing but as a JSON array of objects",
            "Give me that as XML please.",
        )))},
    ]  # fmt: skip
    if rng.random() < 0.4:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEM_GENERIC)})
    return {"messages": messages}


def _multilingual_structured(rng: random.Random, corpus: Corpus) -> dict:
    table = rng.choice(corpus.tables)
    data = table_csv(table, rng.randint(3, 8))
    ask = phrase(rng, (
        "Convierte este CSV a JSON:", "Convertis ces données en JSON :", "Wandle diese CSV-Daten in YAML um:", "把这个CSV转换成JSON：",
        "このCSVをJSONに変換してください。", "Преобразуй этот CSV в JSON:", "Converta este CSV para XML:",
        f"Escribe una consulta SQL que cuente las filas de {table.name} por {table.header[-1]}.",
        f"Schreibe eine SQL-Abfrage für den Durchschnitt von {table.header[-1]} in {table.name}.",
        "Fais un tableau markdown à partir de ces données :",
    ))  # fmt: skip
    return {"text": dress(rng, around(rng, ask, data, "csv"))}


TEMPLATES: tuple[Template, ...] = (
    Template("structured/sql_query", "structured", _sql_query, 130),
    Template("structured/optimise_sql", "structured", _optimise_sql, 70),
    Template("structured/csv_to_other", "structured", _csv_to_other, 100),
    Template("structured/json_to_other", "structured", _json_to_other, 90),
    Template("structured/broken_json", "structured", _broken_json, 50),
    Template("structured/yaml_edit", "structured", _yaml_edit, 70),
    Template("structured/xml_edit", "structured", _xml_edit, 60),
    Template("structured/extract_json", "structured", _extract_json, 110),
    Template("structured/classify_json", "structured", _classify_json, 70),
    Template("structured/sample_data", "structured", _generate_sample_data, 80),
    Template("structured/config_file", "structured", _config_file, 90),
    Template("structured/edit_config", "structured", _edit_config, 40),
    Template("structured/markdown_table", "structured", _markdown_table, 60),
    Template("structured/json_api", "structured", _json_api_answer, 70),
    Template("structured/followup", "structured", _followup_structured, 70),
    Template("structured/multilingual", "structured", _multilingual_structured, 60),
)
