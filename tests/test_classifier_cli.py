"""`switchyard classifier predict|eval` end to end, through real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from classifier import LABELS
from tests.test_classifier import ACCURACY_FLOOR, MACRO_F1_FLOOR

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def _assert_prediction(obj: dict) -> None:
    assert set(obj) == {"label", "probs"}
    assert obj["label"] in LABELS
    assert set(obj["probs"]) == set(LABELS)
    assert sum(obj["probs"].values()) == pytest.approx(1.0, abs=1e-9)
    assert obj["label"] == max(obj["probs"], key=obj["probs"].get)


def test_predict_jsonl_file_text_messages_and_response_format(tmp_path):
    lines = [
        {"text": "Write a Python function that checks whether a number is prime."},
        {"text": "Write a short essay about the history of tea."},
        {"messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Tell me about penguins."},
            {"role": "assistant", "content": "Penguins are flightless birds..."},
            {"role": "user", "content": "Now put the key facts in a table with columns fact, detail."},
        ]},
        {"messages": [{"role": "user", "content": "Write a poem about rain."}], "response_format": {"type": "json_object"}},
        {"text": ""},
        {"text": "Dim the living room lamps to 30 percent.", "tools": [{"type": "function", "function": {
            "name": "set_light", "parameters": {"type": "object", "properties": {"room": {}, "level": {}}}}}]},
    ]  # fmt: skip
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = _run(["-m", "gateway.cli", "classifier", "predict", "--jsonl", str(path)])
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == len(lines)
    for obj in out:
        _assert_prediction(obj)
    assert [o["label"] for o in out[:4]] == ["code", "prose", "structured", "structured"]
    assert out[3]["probs"] == {"code": 0.0, "prose": 0.0, "structured": 1.0}
    assert out[5]["probs"] == {"code": 0.0, "prose": 0.0, "structured": 1.0}   # offered tools: a call


def test_predict_reads_stdin_with_dash_via_module_entry_point():
    stdin = json.dumps({"text": "SELECT name FROM users -- rewrite this query to use a CTE"}) + "\n"
    done = _run(["-m", "classifier.cli", "predict", "--jsonl", "-"], stdin=stdin)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    _assert_prediction(json.loads(line))


def test_bad_lines_give_error_objects_stderr_and_nonzero_exit():
    good = json.dumps({"text": "Explain recursion to a child."})
    stdin = "\n".join([good, "{not json", json.dumps({"prompt": "x"}), json.dumps({"text": 5}), "", json.dumps([1]), good]) + "\n"
    done = _run(["-m", "gateway.cli", "classifier", "predict", "--jsonl", "-"], stdin=stdin)
    assert done.returncode == 1
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == 7
    _assert_prediction(out[0])
    _assert_prediction(out[6])
    for number, obj in zip(range(2, 7), out[1:6]):
        assert set(obj) == {"error"} and obj["error"]["line"] == number and obj["error"]["message"]
    assert "line 2: not valid JSON" in done.stderr
    assert "neither `text` nor `messages`" in done.stderr
    assert "Traceback" not in done.stderr


def test_predict_missing_file_and_missing_model_are_clear_errors(tmp_path):
    done = _run(["-m", "gateway.cli", "classifier", "predict", "--jsonl", str(tmp_path / "absent.jsonl")])
    assert done.returncode != 0 and "cannot read" in done.stderr and "Traceback" not in done.stderr
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "hi"}\n')
    done = _run(["-m", "gateway.cli", "classifier", "predict", "--jsonl", str(path), "--model", str(tmp_path)])
    assert done.returncode != 0 and "cannot read classifier model" in done.stderr and "Traceback" not in done.stderr


def test_eval_reports_held_out_metrics():
    done = _run(["-m", "gateway.cli", "classifier", "eval", "--json"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["n"] > 500
    assert result["accuracy"] >= ACCURACY_FLOOR and result["macro_f1"] >= MACRO_F1_FLOOR
    matrix = result["confusion_matrix"]["rows_true_cols_predicted"]
    assert sum(map(sum, matrix)) == result["n"]


def test_eval_jsonl_scores_any_labelled_file(tmp_path):
    """`eval --jsonl` reads text or messages lines and counts every line in the confusion matrix."""
    lines = [
        {"text": "Write a Python function that returns the n-th Fibonacci number.", "label": "code"},
        {"text": "Write a short essay about the history of tea.", "label": "prose"},
        {"messages": [{"role": "user", "content": "List three fruits as a JSON array."}], "label": "structured"},
        {"text": "Write a short essay about the history of tea.", "label": "code"},  # deliberately wrong
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = _run(["-m", "gateway.cli", "classifier", "eval", "--jsonl", str(path), "--json"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["n"] == 4
    matrix = result["confusion_matrix"]["rows_true_cols_predicted"]
    assert sum(map(sum, matrix)) == 4
    assert matrix[0][1] == 1  # the mislabelled essay: true code, predicted prose
    assert result["accuracy"] == pytest.approx(0.75)
    text = _run(["-m", "gateway.cli", "classifier", "eval", "--jsonl", str(path)])
    assert text.returncode == 0 and "macro-F1=" in text.stdout and "confusion" in text.stdout


def test_eval_jsonl_names_the_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": "hello", "label": "prose"}) + "\n" + json.dumps({"text": "x", "label": "poetry"}) + "\n")
    done = _run(["-m", "gateway.cli", "classifier", "eval", "--jsonl", str(path)])
    assert done.returncode == 1 and "line 2" in done.stderr and "Traceback" not in done.stderr


def test_train_then_eval_round_trip_on_a_small_dataset(tmp_path):
    """`train` writes a loadable model whose `eval` reproduces the metrics `train` reported."""
    from classifier.dataset_io import DEFAULT_DATASET

    per_split = {"train": 40, "test": 15}
    taken: dict[tuple[str, str], int] = {}
    lines = []
    for line in DEFAULT_DATASET.open():
        record = json.loads(line)
        key = (record["split"], record["label"])
        if taken.get(key, 0) < per_split[record["split"]]:
            taken[key] = taken.get(key, 0) + 1
            lines.append(line)
    dataset = tmp_path / "small.jsonl"
    dataset.write_text("".join(lines))
    model_dir = tmp_path / "model"
    done = _run(["-m", "gateway.cli", "classifier", "train", "--dataset", str(dataset), "--out", str(model_dir), "--no-real", "--json"])
    assert done.returncode == 0, done.stderr
    trained = json.loads(done.stdout)
    assert trained["n_train"] == 120 and trained["n_test"] == 45
    done = _run(["-m", "classifier.cli", "eval", "--model", str(model_dir), "--dataset", str(dataset), "--json"])
    assert done.returncode == 0, done.stderr
    evaluated = json.loads(done.stdout)
    assert evaluated["n"] == 45
    assert evaluated["confusion_matrix"] == trained["held_out"]["confusion_matrix"]
    for key in ("accuracy", "macro_f1", "ece", "brier"):
        assert evaluated[key] == pytest.approx(trained["held_out"][key], abs=1e-9)


def test_a_forced_tool_choice_is_structured_in_predict_and_eval_as_in_the_gateway(tmp_path):
    """A request whose tool_choice forces a call is answered by the call's JSON arguments: the gateway routes
    it as structured, and the CLI now reads `tool_choice` the same way (as sent: "required", a named function
    or custom tool, allowed_tools in mode "required"); "auto" and "none" leave the label to the model."""
    ask = "What is the weather in Paris tomorrow?"
    forced = ["required", {"type": "function", "function": {"name": "get_weather"}},
              {"type": "custom", "custom": {"name": "apply_patch"}},
              {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}}]
    free = ["auto", "none", {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}]
    lines = [{"text": ask, "tool_choice": choice} for choice in forced + free]
    lines.append({"messages": [{"role": "user", "content": ask}], "tool_choice": "required"})
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = _run(["-m", "gateway.cli", "classifier", "predict", "--jsonl", str(path)])
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    structured = {"code": 0.0, "prose": 0.0, "structured": 1.0}
    assert [o["probs"] == structured for o in out] == [True] * 4 + [False] * 3 + [True]
    assert out[4]["label"] == "prose"   # the ask alone: weather talk
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("".join(json.dumps({**line, "label": "structured"}) + "\n" for line in lines))
    report = _run(["-m", "gateway.cli", "classifier", "eval", "--jsonl", str(labelled), "--json"])
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["accuracy"] == pytest.approx(5 / 8)   # eval reads them as predict does
