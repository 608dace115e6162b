"""`switchyard classifier train|eval|predict` (also runnable as `python -m classifier.cli ...`).

predict (public contract): `--jsonl FILE` (`-` = stdin) reads one JSON object per line, with a
`text` string or OpenAI `messages` (optionally `response_format`, `tools` and `tool_choice`, read as the
gateway reads a chat request's), and prints exactly one JSON line
per input line: {"label": ..., "probs": {"code": p, "prose": p, "structured": p}}.
A line that cannot be classified (not JSON, no text/messages, wrong types, blank) prints
{"error": {"line": N, "message": ...}} in its place, the message also goes to stderr, and the
command exits with status 1 after processing every line.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import IO, Callable, Iterator

from contracts.errors import InvalidRequestError, ModelLoadError

EXIT_BAD_INPUT = 1
EXIT_MODEL_ERROR = 2


def _quiet_broken_pipe(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A reader that goes away (`... | head`) ends the command quietly, not with a traceback."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
            return EXIT_BAD_INPUT

    return run


def _open_input(name: str) -> IO[str]:
    return sys.stdin if name == "-" else open(name, encoding="utf-8")


def _parse_line(line: str):
    from contracts.request_text import from_record

    if not line.strip():
        raise InvalidRequestError("blank line: expected a JSON object with `text` or `messages`")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"not valid JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(record, dict):
        raise InvalidRequestError("expected a JSON object with `text` or `messages`")
    if "messages" in record:
        request = from_record(record)
        if not request.user and not request.system and not request.history:
            raise InvalidRequestError("`messages` holds no text", param="messages")
        return request
    if "text" in record:
        if not isinstance(record["text"], str):
            raise InvalidRequestError("`text` must be a string", param="text")
        return from_record(record)
    raise InvalidRequestError("object has neither `text` nor `messages`")


def predict_lines(lines: Iterator[str], classifier) -> Iterator[tuple[dict, str | None]]:
    """(output object, error message or None) for every input line."""
    for number, line in enumerate(lines, start=1):
        try:
            request = _parse_line(line)
        except InvalidRequestError as exc:
            message = str(exc)
            yield {"error": {"line": number, "message": message}}, message
            continue
        yield classifier.predict(request).to_json(), None


def cmd_predict(args: argparse.Namespace) -> int:
    from classifier.model import Classifier

    try:
        classifier = Classifier.load(args.model)
    except ModelLoadError as exc:
        print(f"switchyard classifier: {exc}", file=sys.stderr)
        return EXIT_MODEL_ERROR
    try:
        handle = _open_input(args.jsonl)
    except OSError as exc:
        print(f"switchyard classifier: cannot read {args.jsonl}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    bad = 0
    with handle:
        lines = (line.rstrip("\r\n") for line in handle)
        for output, error in predict_lines(lines, classifier):
            if error is not None:
                bad += 1
                print(f"switchyard classifier: line {output['error']['line']}: {error}", file=sys.stderr)
            sys.stdout.write(json.dumps(output) + "\n")
    return EXIT_BAD_INPUT if bad else 0


def _print_report(report: dict) -> None:
    matrix = report["confusion_matrix"]
    labels = matrix["labels"]
    print(f"n={report['n']}  accuracy={report['accuracy']:.4f}  macro-F1={report['macro_f1']:.4f}  "
          f"ECE={report['ece']:.4f}  Brier={report['brier']:.4f}")  # fmt: skip
    print("confusion (rows = true, columns = predicted)")
    print(" " * 12 + "".join(f"{label:>12}" for label in labels))
    for label, row in zip(labels, matrix["rows_true_cols_predicted"]):
        print(f"{label:>12}" + "".join(f"{count:>12}" for count in row))


def cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from classifier.dataset_io import load_split, read_labelled_jsonl
    from classifier.metrics import report
    from classifier.model import Classifier
    from contracts.names import CLASSES as LABELS

    try:
        classifier = Classifier.load(args.model)
    except ModelLoadError as exc:
        print(f"switchyard classifier: {exc}", file=sys.stderr)
        return EXIT_MODEL_ERROR
    try:
        data = read_labelled_jsonl(Path(args.jsonl)) if args.jsonl else load_split(args.split, args.dataset)
    except OSError as exc:
        print(f"switchyard classifier: cannot read {args.jsonl}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InvalidRequestError as exc:
        print(f"switchyard classifier: {args.jsonl}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    probs = np.array([[p.probs[label] for label in LABELS] for p in map(classifier.predict, data.requests)])
    result = report(LABELS, data.labels, probs)
    if args.json:
        print(json.dumps(result))
    else:
        _print_report(result)
    return 0


def cmd_loso(args: argparse.Namespace) -> int:
    from classifier.loso import markdown_table, run

    result = run(args.only)
    print(json.dumps(result) if args.json else markdown_table(result))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from classifier.train import train_and_save

    info = train_and_save(args.dataset, args.out, None if args.no_real else args.real)
    if args.json:
        print(json.dumps(info))
    else:
        print(f"trained on {info['n_train']} prompts, saved to {args.out}")
        _print_report(info["held_out"])
        print(f"uncalibrated ECE={info['held_out']['uncalibrated_ece']:.4f}")
    return 0


def _add_commands(sub) -> None:
    from classifier.dataset_io import DEFAULT_DATASET, REAL_DATASET
    from classifier.model import MODEL_DIR

    predict = sub.add_parser("predict", help="classify JSON lines (text or OpenAI messages)")
    predict.add_argument("--jsonl", required=True, help="input file, one JSON object per line; - for stdin")
    predict.add_argument("--model", type=Path, default=None, help="model directory (default: the shipped model)")
    predict.set_defaults(func=_quiet_broken_pipe(cmd_predict))

    evaluate = sub.add_parser("eval", help="accuracy, macro-F1 and confusion matrix (held-out split, or --jsonl FILE)")
    evaluate.add_argument("--jsonl", default=None, help='labelled JSONL, one {"text" or "messages", "label"} per line')
    evaluate.add_argument("--model", type=Path, default=None)
    evaluate.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    evaluate.add_argument("--split", choices=("test", "train", "all"), default="test")
    evaluate.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluate.set_defaults(func=_quiet_broken_pipe(cmd_eval))

    loso = sub.add_parser("loso", help="leave-one-source-out evaluation over the real-prompt sources (~7 min)")
    loso.add_argument("--json", action="store_true")
    loso.add_argument("--only", nargs="*", default=(), help="evaluate only these held-out sources")
    loso.set_defaults(func=_quiet_broken_pipe(cmd_loso))

    train = sub.add_parser("train", help="refit the model from the shipped prompt set (deterministic)")
    train.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    train.add_argument("--out", type=Path, default=MODEL_DIR, help="where to write model.json + weights.npz")
    train.add_argument("--real", type=Path, default=REAL_DATASET, help="real-prompt set added to the training split")
    train.add_argument("--no-real", action="store_true", help="train on --dataset's train split alone")
    train.add_argument("--json", action="store_true")
    train.set_defaults(func=_quiet_broken_pipe(cmd_train))


def register(subparsers) -> None:
    parser = subparsers.add_parser("classifier", help="request classifier: code / prose / structured")
    _add_commands(parser.add_subparsers(dest="classifier_command", required=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classifier.cli", description="request classifier")
    _add_commands(parser.add_subparsers(dest="classifier_command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
