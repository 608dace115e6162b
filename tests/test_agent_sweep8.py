"""An eighth agent sweep: what coding agents and chat UIs send and read back (Codex's request metadata, reasoning
summaries, ...), reproduced with the openai / anthropic SDKs against a served gateway. Each test is a gap the
sweep found."""

from __future__ import annotations

import pytest

from tests.agent_sweeps import WEATHER, srv  # noqa: F401 - srv is the shared fixture
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post


def test_responses_take_codex_client_metadata(srv):
    """Codex sends its installation id in `client_metadata` on every /v1/responses request (openai/codex#16912):
    it was an "Unrecognized request argument" 400, so every Codex turn failed. It is accepted and changes
    nothing, streamed or not."""
    body = {"input": "hi", "store": False, "client_metadata": {"x-codex-installation-id": "5f0c8f9e"}}
    reply = _post(srv, "/v1/responses", body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][-1]["content"][0]["text"] == "It is sunny."
    streamed = _post(srv, "/v1/responses", {**body, "stream": True})
    assert streamed.status_code == 200 and "response.completed" in streamed.text


def test_responses_return_the_reasoning_as_the_summary_asked_for(srv):
    """`reasoning.summary` ("auto", as Codex sends it) came back as an empty `summary` with the text only in
    reasoning_text content and events, which Codex and the other summary readers do not show: the reasoning
    panel stayed empty. Asked for, the reasoning is the summary (its whole text: no summariser runs here),
    whole and streamed with the summary events; not asked for, it stays reasoning_text content, as before.
    The request's reasoning settings are echoed as OpenAI's Response does."""
    client = _openai(srv)
    asked = dict(model="default", input="Weather in Paris?", tools=[WEATHER],
                 reasoning={"effort": "low", "summary": "auto"})
    whole = client.responses.create(**asked)
    item = whole.output[0]
    assert item.type == "reasoning" and [part.text for part in item.summary] == ["Fine.\n"]
    assert not item.content
    assert whole.reasoning.summary == "auto" and whole.reasoning.effort == "low"

    with client.responses.stream(**asked) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert "response.reasoning_text.delta" not in kinds
    summary = ["response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
               "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]
    assert [kind for kind in kinds if kind in summary] == summary
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert deltas == "Fine.\n" == final.output[0].summary[0].text

    plain = client.responses.create(model="default", input="hi")
    assert plain.output[0].summary == [] and plain.output[0].content[0].text == "Fine.\n"
    # a summary sent back in the next request's input is the turn's reasoning again
    client.responses.create(model="default", input=[
        {"role": "user", "content": "Weather in Paris?"}, item.model_dump(exclude_none=True),
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"role": "user", "content": "And now?"}])
    assert srv.backend.chats[-1]["messages"][1]["reasoning_content"] == "Fine.\n"


def test_a_hosted_web_search_says_how_codex_leaves_it_out(srv):
    """Codex offers OpenAI's hosted web search by default ({"type": "web_search", "external_web_access": false}
    beside its function tools), which a server with no hosted tools refuses as OpenAI refuses it for a model
    without search: the README's Codex config left it on, so every Codex turn was that 400, and the 400 did not
    say how to turn it off. The config now sets web_search = "disabled" and the 400 names that setting."""
    reply = _post(srv, "/v1/responses", {"input": "hi", "tools": [
        {"type": "web_search", "external_web_access": False}, {**WEATHER, "strict": False}]})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"].startswith("tools")
    assert 'web_search = "disabled"' in reply.json()["error"]["message"]
    from tests.ops_helpers import REPO

    codex = (REPO / "README.md").read_text().split("**Codex CLI**")[1].split("```")[1]
    assert 'web_search = "disabled"' in codex.split("[model_providers")[0]   # a top-level key, before the table


def test_consecutive_anthropic_turns_of_one_role_are_one_turn(srv):
    """Anthropic's API combines consecutive user or assistant messages into one turn, and clients that keep
    each block of a reply as its own message (one for the text, one per tool_use) send them so. Here they
    were rendered as separate turns, and a tool_result answering the tool_use of the first of two assistant
    messages was a 400 ("answers no tool_use block of the previous message")."""
    import anthropic

    client = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    tool = {"name": "get_weather", "input_schema": WEATHER["parameters"]}
    use = {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}}
    other = {**use, "id": "toolu_b", "input": {"city": "Rome"}}
    history = [{"role": "user", "content": "Weather in Paris"},
               {"role": "user", "content": [{"type": "text", "text": "and in Rome?"}]},
               {"role": "assistant", "content": [use]},
               {"role": "assistant", "content": [{"type": "text", "text": "And Rome."}, other]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"},
                                            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "rain"}]}]
    reply = client.messages.create(model="default", max_tokens=64, tools=[tool], messages=history)
    assert reply.content[-1].text == "It is sunny."
    prompt = srv.backend.encoded[-1]
    assert prompt.count("<|im_start|>user") == 2   # the two user messages as one turn, then the tool results
    assert "Weather in Paris\nand in Rome?" in prompt
    assert prompt.count("<|im_start|>assistant") == 2   # one assistant turn holding both calls, and the reply
    assert prompt.index("Paris\n</parameter>") < prompt.index("Rome\n</parameter>") < prompt.index("sunny")
    # still Anthropic's rule: a result must answer a call of the assistant turn just before it
    history[4:4] = [{"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "Anything else?"}]
    with pytest.raises(anthropic.BadRequestError, match="toolu_a"):
        client.messages.create(model="default", max_tokens=64, tools=[tool], messages=history)
