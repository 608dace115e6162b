"""A request that gives its caches back mid-reply and later goes on from where it was (contracts.engine.Released).

The scheduler's memory budget counts what the running requests' caches hold now, not all that they may reach;
when the running ones grow past it, it asks the newest to release (CancelToken.ask_release). Between two steps
`resumable` then closes the engine's steps (the target's caches, a decode batch's row, the MTP head's and the
drafter's state all go with them) and yields Released. When the scheduler resumes the request, the engine starts
again on the prompt followed by the tokens already written (`written`): the prefix cache usually still holds the
prompt, so only the reply's rows are prefilled again. Greedy, the reply goes on as it would have (the same
tokens' rows); sampled, it goes on from the target's distribution given everything written, with a new random
stream (a seeded request's stream is derived from its seed and the tokens written: reproducible, but not the
stream it would have drawn without the release).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from contracts.engine import CancelToken, Pause, Released, StepResult, SwitchRule
from contracts.sampling import SEEDS, SamplingParams

from .processing import TargetProcessor
from .sampling import Rng

# (tokens written so far, engine to run, its switch rule) -> that engine's steps
Start = Callable[[tuple[int, ...], str, SwitchRule | None], Iterator[StepResult | Pause]]


def request_rng(params: SamplingParams, written: Sequence[int]) -> Rng:
    """The request's random stream: its seed's, or after a release one derived from the seed and the tokens
    written (another draw of the same distribution)."""
    if params.seed is None or not written:
        return Rng(params.seed)
    return Rng((params.seed * 1_000_003 + len(written)) % SEEDS)


def request_processor(params: SamplingParams, prompt_ids: Sequence[int], written: Sequence[int], tokenizer,
                      vocab: int) -> TargetProcessor:
    """The request's penalties, bias and constraint, having seen the tokens it already wrote."""
    processor = TargetProcessor(params, prompt_ids, tokenizer, vocab)
    if written:
        processor.advance(written)
    return processor


def resumable(start: Start, engine: str, switch: SwitchRule | None,
              cancel: CancelToken) -> Iterator[StepResult | Pause]:
    """The engine's steps, releasing the caches whenever the scheduler asks and resuming after them."""
    written: list[int] = []
    steps = start((), engine, switch)
    resumed = False
    try:
        while not cancel.cancelled:
            if cancel.release_asked:
                steps.close()   # its finally blocks free the caches and leave the decode batch now
                cancel.released()
                yield Released(len(written), len(written))
                # where it ran last: a request handed to raw stays there; a speculative one probes no peers again
                if engine == "raw":
                    switch = None
                elif switch is not None:
                    switch = replace(switch, probe_steps=0)
                steps, resumed = start(tuple(written), engine, switch), True
                continue
            try:
                step = next(steps)
            except StopIteration:
                return
            if isinstance(step, StepResult):
                written.extend(step.tokens)
                engine = step.engine
                if resumed:   # its time holds the prefill again, its cached tokens are not the prompt's
                    step, resumed = replace(step, cached_tokens=0, interleaved=True), False
            yield step
    finally:
        steps.close()
