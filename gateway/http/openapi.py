"""GET /openapi.json: an OpenAPI 3.1 document built from the pydantic models the handlers use.

Request bodies are the validation schemas of the request models; responses are the serialization
schemas of the response models; every error status documents OpenAI's error object. Fuzzers
(tests/test_fuzz_api.py runs schemathesis) and client generators read it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from gateway.config import GatewayConfig

from . import anthropic_schemas, embeddings, ollama_schemas, responses_schemas, schemas, tokenize
from .ollama_options import NEUTRAL_OPTIONS, OllamaOptions

REF = "#/components/schemas/{model}"
API_KEY_SCHEME = "ApiKey"

_REQUESTS: tuple[type[BaseModel], ...] = (schemas.ChatCompletionRequest, schemas.CompletionRequest,
                                           anthropic_schemas.MessagesRequest, anthropic_schemas.CountTokensRequest,
                                           responses_schemas.ResponsesRequest, responses_schemas.InputTokensRequest,
                                           ollama_schemas.OllamaChatRequest, ollama_schemas.OllamaGenerateRequest,
                                           ollama_schemas.OllamaShowRequest, tokenize.TokenizeTextRequest,
                                           tokenize.TokenizeChatRequest, tokenize.TokenizeContentRequest,
                                           tokenize.DetokenizeRequest, embeddings.EmbeddingRequest,
                                           ollama_schemas.OllamaEmbedRequest, ollama_schemas.OllamaEmbeddingsRequest)
_RESPONSES: tuple[type[BaseModel], ...] = (
    schemas.ChatCompletion, schemas.Completion, schemas.ModelList, schemas.ModelCard, schemas.ErrorResponse,
    schemas.Health, anthropic_schemas.AnthropicErrorResponse, anthropic_schemas.TokenCount,
    responses_schemas.InputTokenCount, ollama_schemas.OllamaChatResponse, ollama_schemas.OllamaGenerateResponse,
    ollama_schemas.OllamaTags, ollama_schemas.OllamaRunning, ollama_schemas.OllamaShow, ollama_schemas.OllamaVersion,
    ollama_schemas.OllamaError, tokenize.Tokenized, tokenize.TokenizedContent, tokenize.Detokenized,
    embeddings.EmbeddingList, ollama_schemas.OllamaEmbedResponse, ollama_schemas.OllamaEmbeddingsResponse,
)

# Statuses each kind of operation can answer with an error object.
_GENERATION_ERRORS = {
    "400": "Invalid request (validation, unsupported parameter, limit exceeded, prompt too long)",
    "401": "Missing or wrong API key", "404": "Unknown model",
    "408": "Request body not received in time", "413": "Request body too large",
    "415": "Body is not JSON", "429": "Queue full (see Retry-After)", "500": "Engine failure",
    "503": "Model worker unavailable or shutting down", "504": "Request timeout",
}
# 400s for rules a JSON Schema cannot state, by `code` (the Anthropic endpoint says them in `message`)
SEMANTIC_RULES = (
    "Beyond the schema, a 400 answers: a tool_choice naming a function that is not among `tools` (code "
    "unknown_tool); two tools with one name (duplicate_tool_name); a response schema, or under a forced "
    "tool_choice a callable tool's parameters, that the constraint library cannot compile "
    "(invalid_json_schema); a conversation with nothing to answer (empty_conversation); an assistant prefix "
    "(`prefix: true`) that is not the last message or holds tool_calls (invalid_prefix), or comes with a forced "
    "tool_choice or a JSON "
    "response_format (conflicting_constraints); top_logprobs above 0 with logprobs false, and on completions "
    "best_of below n or, streamed, above it, and echo with truncate_prompt_tokens (conflicting_constraints); "
    "prompt_logprobs on a stream (conflicting_constraints); a prompt plus max_tokens over the model's "
    "context "
    "(context_length_exceeded); a completion prompt's token id past the model's vocabulary (invalid_token_id), "
    "as a logit_bias or stop_token_ids id past it; more than one of vLLM's structured outputs (guided_json, "
    "guided_regex, guided_choice, guided_grammar, structured_outputs' members), or one beside a JSON "
    "response_format or a forced tool_choice (conflicting_constraints), and one the constraint library cannot "
    "compile (invalid_json_schema, invalid_grammar); min_tokens above max_tokens (conflicting_constraints); on chat, "
    "continue_final_message with add_generation_prompt true (conflicting_constraints) or without a last assistant "
    "message (invalid_prefix), and add_generation_prompt false without it (unsupported_parameter); "
    "on /v1/messages, a tool_result that answers no tool_use of the message before "
    "it (unmatched_tool_result) and a final assistant message (prefill) ending in whitespace (invalid_prefix)."
)
# what an endpoint that reads a body but queues nothing can answer (token counting, Ollama's show, /tokenize)
_BODY_ERRORS = {k: v for k, v in _GENERATION_ERRORS.items() if k in ("400", "401", "404", "408", "413", "415")}
_READ_ERRORS = {"401": "Missing or wrong API key"}
_ADMIN_ERRORS = {"401": "Missing or wrong API key", "403": "Not a loopback client and no API key",
                 "404": "No adaptive router / no policy file"}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(model: type[BaseModel] | None, description: str) -> dict[str, Any]:
    schema = _ref(model) if model is not None else {"type": "object"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(statuses: dict[str, str], error: type[BaseModel] = schemas.ErrorResponse) -> dict[str, Any]:
    return {status: _json(error, text) for status, text in statuses.items()}


def _generation(summary: str, request: type[BaseModel], response: type[BaseModel] | None, engine: dict[str, Any],
                error: type[BaseModel] = schemas.ErrorResponse, ndjson: bool = False) -> dict[str, Any]:
    if ndjson:   # Ollama: streams unless `stream` is false; each line one reply object, the last one done
        ok = _json(response, "The reply (JSON) when `stream` is false, else newline-delimited JSON: one such "
                             "object per line, the last with `done: true` and the counts")
        ok["content"]["application/x-ndjson"] = {"schema": {"type": "string"}}
    else:
        ok = _json(response, "The completion (JSON), or server-sent events when `stream` is true")
        # one server-sent event: `data` is a JSON chunk, an error object, or "[DONE]" (chat and completions);
        # /v1/messages and /v1/responses name each event (`event:`) and send no [DONE]
        ok["content"]["text/event-stream"] = {"schema": {"type": "object", "required": ["data"],
                                                         "properties": {"data": {"type": "string"}}}}
    ok["headers"] = {name: {"schema": {"type": "string"}} for name in
                     ("X-Switchyard-Engine", "X-Switchyard-Class", "X-Switchyard-Route-Reason")}
    return {
        "post": {
            "summary": summary,
            "description": SEMANTIC_RULES,
            "parameters": [{
                "name": "X-Switchyard-Engine", "in": "header", "required": False,
                "description": "Force an engine: raw | mtp | ddtree | auto (the body field `engine` wins)",
                "schema": engine,
            }, {
                "name": "X-Switchyard-Priority", "in": "header", "required": False,
                "description": "Queue priority, -1000..1000 (higher leaves the queue first; the body field "
                               "`priority` of chat and completions wins)",
                "schema": {"type": "integer", "minimum": -1000, "maximum": 1000},
            }],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
            "responses": {"200": ok, **_errors(_GENERATION_ERRORS, error)},
        }
    }


def _embedding(summary: str, request: type[BaseModel], response: type[BaseModel],
               error: type[BaseModel] = schemas.ErrorResponse) -> dict[str, Any]:
    """An embeddings operation: queued as a generation is (priority header, queue, timeout), no engine to pick."""
    return {"post": {
        "summary": summary,
        "description": "Beyond the schema, a 400 answers an input's token id past the model's vocabulary "
                       "(invalid_token_id) and an input over the model's context (context_length_exceeded; Ollama's "
                       "/api/embed cuts it to the context unless `truncate` is false).",
        "parameters": [{"name": "X-Switchyard-Priority", "in": "header", "required": False,
                        "description": "Queue priority, -1000..1000 (higher leaves the queue first)",
                        "schema": {"type": "integer", "minimum": -1000, "maximum": 1000}}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
        "responses": {"200": _json(response, "The embeddings"), **_errors(_GENERATION_ERRORS, error)},
    }}


def _get(summary: str, response: dict[str, Any], errors: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": response, **_errors(errors)}, **extra}}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}], "default": None}


def _one_of_values(*values: Any) -> dict[str, Any]:
    return {"enum": list(values)}


def _engine_pattern(engines: tuple[str, ...]) -> str:
    """Engine names as the server reads them: case-insensitive, surrounding blanks ignored, "" = auto."""
    names = "|".join("".join(f"[{c.lower()}{c.upper()}]" for c in name) for name in (*engines, "auto"))
    return rf"^[ \t]*({names})?[ \t]*$"


def _honoured(defs: dict[str, Any], config: GatewayConfig, engines: tuple[str, ...], models: tuple[str, ...],
              fills_in_middle: bool = False, embedding_size: int = schemas.INT32_MAX) -> None:
    """Narrow the request schemas from "what parses" to "what this server serves": OpenAI fields it
    only accepts at their neutral value, its limits, its model names and engines. The handlers
    reject everything else with a 400/404, so the document describes the accepted inputs exactly."""
    stop = {"type": "string", "minLength": 1, "maxLength": config.max_stop_chars}
    common = {
        "model": _nullable({"type": "string", "enum": sorted(models)}),
        # without --max-tokens-limit the ceiling is the room the prompt leaves in the context (a 400 past it)
        "max_tokens": _nullable({"type": "integer", "minimum": 1, "maximum": config.max_tokens_limit or schemas.INT32_MAX}),
        "stop": {"anyOf": [stop, {"type": "array", "items": stop, "maxItems": config.max_stop_sequences},
                           {"type": "null"}], "default": None},
        "engine": _nullable({"type": "string", "pattern": _engine_pattern(engines)}),
        "n": _nullable({"type": "integer", "minimum": 1, "maximum": config.max_choices}),
        "logit_bias": _nullable({"type": "object", "maxProperties": schemas.MAX_LOGIT_BIAS,
                                 "propertyNames": {"pattern": "^[0-9]+$"},
                                 "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}}),
    }
    # vLLM's fields for what is not run here (beam search, typical sampling, stop strings in the text): neutral only
    for name, neutral in (("use_beam_search", False), ("length_penalty", 1.0), ("typical_p", 1.0),
                          ("include_stop_str_in_output", False)):
        common[name] = _one_of_values(None, neutral)
    chat = defs["ChatCompletionRequest"]["properties"]
    chat.update(common)
    chat["max_completion_tokens"] = common["max_tokens"]
    chat["messages"]["maxItems"] = config.max_messages
    # a forced tool call needs tools (which one it names is checked by the server: code unknown_tool)
    defs["ChatCompletionRequest"]["allOf"] = [{
        "if": {"properties": {"tool_choice": {"anyOf": [{"const": "required"}, {"type": "object"}]}},
               "required": ["tool_choice"]},
        "then": {"properties": {"tools": {"type": "array", "minItems": 1}}, "required": ["tools"]},
    }, {   # vLLM's add_generation_prompt false only to continue the last message (continue_final_message)
        "if": {"properties": {"add_generation_prompt": {"const": False}}, "required": ["add_generation_prompt"]},
        "then": {"properties": {"continue_final_message": {"const": True}}, "required": ["continue_final_message"]},
    }]
    chat["functions"] = _nullable({"type": "array", "maxItems": 0})
    chat["function_call"] = _one_of_values(None)
    for name in schemas.UNSUPPORTED_OUTPUTS:
        chat[name] = _one_of_values(None)
    # a function's parameters: a JSON schema of an object (llguidance refuses malformed keywords; compiled
    # when tool_choice forces a call, which is decoded against it)
    defs["FunctionDefinition"]["properties"]["parameters"] = _nullable(
        {"type": "object", "properties": {"type": {"const": "object"}}})
    _honoured_translations(defs, common, stop, config)
    completion = defs["CompletionRequest"]["properties"]
    completion.update(common)
    # max_tokens 0: nothing generated, only with echo (the prompt read back, scored with logprobs)
    completion["max_tokens"] = _nullable({"type": "integer", "minimum": 0,
                                          "maximum": config.max_tokens_limit or schemas.INT32_MAX})
    defs["CompletionRequest"]["allOf"] = [{
        "if": {"properties": {"max_tokens": {"const": 0}}, "required": ["max_tokens"]},
        "then": {"properties": {"echo": {"const": True}}, "required": ["echo"]},
    }]
    # one prompt (text or token ids) or a batch of them (one choice each, times n); "" too: generated from the
    # start of a text
    completion["prompt"] = _texts_or_token_ids({"type": "string"}, config.max_prompts)
    # fill in the middle: a model whose tokenizer has no FIM tokens takes no suffix (a 400 naming why)
    if not fills_in_middle:
        completion["suffix"] = _one_of_values(None, "")
    # at least n (a 400 otherwise); above n: the n likeliest of best_of, not streamed
    completion["best_of"] = _nullable({"type": "integer", "minimum": 1, "maximum": config.max_choices})
    _honoured_ollama(defs, chat, common, models, fills_in_middle)
    _honoured_embeddings(defs, common, config, embedding_size)
    for name in ("TokenizeTextRequest", "TokenizeChatRequest", "DetokenizeRequest"):
        defs[name]["properties"]["model"] = common["model"]
    tokenizing = defs["TokenizeChatRequest"]["properties"]
    tokenizing["messages"]["maxItems"] = config.max_messages
    tokenizing["tools"] = chat["tools"]
    # as on chat: add_generation_prompt false only to continue the last message
    defs["TokenizeChatRequest"]["allOf"] = defs["ChatCompletionRequest"]["allOf"][1:]


def _honoured_embeddings(defs: dict[str, Any], common: dict[str, Any], config: GatewayConfig,
                         embedding_size: int) -> None:
    """The embeddings bodies (gateway.http.embeddings): a text to embed is not empty (Ollama's "" alone is its
    load call), a request holds at most max_embedding_inputs of them, `dimensions` at most the embedding's."""
    text = {"type": "string", "minLength": 1}
    dimensions = _nullable({"type": "integer", "minimum": 1, "maximum": embedding_size})
    openai = defs["EmbeddingRequest"]["properties"]
    openai["model"] = common["model"]
    openai["input"] = _texts_or_token_ids(text, config.max_embedding_inputs)
    openai["dimensions"] = dimensions
    ollama = defs["OllamaEmbedRequest"]["properties"]
    ollama["input"] = _nullable({"anyOf": [{"type": "string"}, {"type": "array", "items": text,
                                                                  "maxItems": config.max_embedding_inputs}]})
    ollama["dimensions"] = dimensions


def _texts_or_token_ids(text: dict[str, Any], most: int) -> dict[str, Any]:
    """OpenAI's four shapes of a prompt or an embedding's input (schemas.texts_or_token_ids): a text, token ids, or
    up to `most` of either. An id past the model's vocabulary is a 400 the model's size decides."""
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": schemas.INT32_MAX}, "minItems": 1}
    batch = {"minItems": 1, "maxItems": most}
    return {"anyOf": [text, ids, {"type": "array", "items": text, **batch}, {"type": "array", "items": ids, **batch}]}


def _forcing_needs_tools(forced: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"if": {"properties": {"tool_choice": forced}, "required": ["tool_choice"]},
             "then": {"properties": {"tools": {"type": "array", "minItems": 1}}, "required": ["tools"]}}]


def _honoured_translations(defs: dict[str, Any], common: dict[str, Any], stop: dict[str, Any],
                           config: GatewayConfig) -> None:
    """/v1/messages and /v1/responses run through the chat request: the same limits apply."""
    messages = defs["MessagesRequest"]["properties"]
    messages["model"] = {"type": "string", "enum": common["model"]["anyOf"][0]["enum"]}
    messages["max_tokens"] = {"type": "integer", "minimum": 1, "maximum": config.max_tokens_limit or schemas.INT32_MAX}
    messages["stop_sequences"] = _nullable({"type": "array", "items": stop, "maxItems": config.max_stop_sequences})
    messages["engine"] = common["engine"]
    messages["messages"]["maxItems"] = config.max_messages
    counting = defs["CountTokensRequest"]["properties"]
    counting["model"] = messages["model"]
    counting["messages"]["maxItems"] = config.max_messages
    defs["CountTokensRequest"]["allOf"] = _forcing_needs_tools(
        {"properties": {"type": {"enum": ["any", "tool"]}}, "required": ["type"]})
    defs["MessagesRequest"]["allOf"] = _forcing_needs_tools(
        {"properties": {"type": {"enum": ["any", "tool"]}}, "required": ["type"]})
    defs["AnthropicToolChoice"]["allOf"] = [{"if": {"properties": {"type": {"const": "tool"}}},
                                             "then": {"required": ["name"], "properties": {"name": {"type": "string"}}}}]
    for name in ("ResponsesRequest", "InputTokensRequest"):
        prompt = defs[name]["properties"]
        prompt["model"] = common["model"]
        prompt["previous_response_id"] = _one_of_values(None)   # stateless: refused with the reason
        prompt["conversation"] = _one_of_values(None)
        prompt["truncation"] = _one_of_values(None, "disabled")
        defs[name]["allOf"] = _forcing_needs_tools({"anyOf": [{"const": "required"}, {"type": "object"}]})
    responses = defs["ResponsesRequest"]["properties"]
    responses["max_output_tokens"] = common["max_tokens"]
    responses["engine"] = common["engine"]
    responses["background"] = _one_of_values(None, False)
    for name in responses_schemas.UNSUPPORTED_FIELDS:
        responses[name] = _one_of_values(None)
    defs["FunctionTool"]["properties"]["parameters"] = _nullable(
        {"type": "object", "properties": {"type": {"const": "object"}}})
    defs["AnthropicTool"]["properties"]["input_schema"] = {"type": "object", "properties": {"type": {"const": "object"}}}
    for name in ("AnthropicTool", "FunctionTool", "CustomTool"):   # no server-side tool search or code execution
        tool = defs[name]["properties"]
        tool["defer_loading"] = _one_of_values(None, False)
        tool["allowed_callers"] = _nullable({"type": "array", "items": {"const": "direct"}})
    for name in ("FunctionTool", "CustomTool"):   # no asynchronous calls
        defs[name]["properties"]["async"] = _one_of_values(None, False)
    # vendor features not hosted here (schemas.not_hosted): null or empty only
    for name in ("prompt", "background_options", "access_programs", "image"):
        responses[name] = _nullable({"type": "object", "maxProperties": 0})
    defs["FunctionCallItem"]["properties"]["namespace"] = {"anyOf": [{"type": "null"},
                                                                     {"type": "string", "maxLength": 0}]}
    for name in ("MessagesRequest", "CountTokensRequest"):
        defs[name]["properties"]["container"] = {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 0},
                                                           {"type": "object", "maxProperties": 0}]}
        defs[name]["properties"]["mcp_servers"] = _nullable({"type": "array", "maxItems": 0})


def _honoured_ollama(defs: dict[str, Any], chat: dict[str, Any], common: dict[str, Any], models: tuple[str, ...],
                     fills_in_middle: bool) -> None:
    """Ollama's bodies run through the chat and completions requests: the same limits apply, and each option
    takes the values of the field it stands for (gateway.http.ollama_options)."""
    options = defs["OllamaOptions"]["properties"]
    for name in ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty"):
        options[name] = chat[name]
    # "" or []: no stop (option_fields leaves it out)
    options["stop"] = {"anyOf": [*chat["stop"]["anyOf"], {"const": ""}, {"type": "array", "maxItems": 0}],
                       "default": None}
    options["repeat_penalty"] = chat["repetition_penalty"]
    # > 0: max_tokens; 0 or less (-1 no limit, -2 fill the context): the server's default
    options["num_predict"] = _nullable({"type": "integer", "maximum": common["max_tokens"]["anyOf"][0]["maximum"]})
    options["repeat_last_n"] = chat["repeat_last_n"]
    for name, neutral in NEUTRAL_OPTIONS.items():
        options[name] = _one_of_values(None, neutral)
    for name in ("ChatCompletionRequest", "CompletionRequest"):   # clients that speak Ollama send it here too
        defs[name]["properties"]["options"] = _nullable(_ref(OllamaOptions))
    # a model's name, or Ollama's default tag on it
    named = _nullable({"type": "string", "enum": sorted({*models, *(f"{name}:latest" for name in models)})})
    for name in ("OllamaChatRequest", "OllamaGenerateRequest"):
        body = defs[name]["properties"]
        body["model"] = named
        body["engine"] = common["engine"]
    ollama_chat = defs["OllamaChatRequest"]["properties"]
    ollama_chat["messages"]["maxItems"] = chat["messages"]["maxItems"]
    ollama_chat["tools"] = chat["tools"]
    defs["OllamaMessage"]["properties"]["images"] = _nullable({"type": "array", "maxItems": 0})
    generate = defs["OllamaGenerateRequest"]["properties"]
    # the model's own chat template renders every prompt; a text-only model
    generate["template"] = {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 0}], "default": None}
    for name in ("context", "images"):
        generate[name] = _nullable({"type": "array", "maxItems": 0})
    if not fills_in_middle:
        generate["suffix"] = _one_of_values(None, "")
    for name in ("OllamaEmbedRequest", "OllamaEmbeddingsRequest"):
        defs[name]["properties"]["model"] = named
    defs["OllamaShowRequest"]["properties"]["model"] = named
    defs["OllamaShowRequest"]["properties"]["name"] = named


def _ollama_paths(engine_header: dict[str, Any]) -> dict[str, Any]:
    """Ollama's native API (gateway.http.ollama): its errors are Ollama's {"error": "message"}."""
    ollama = ollama_schemas
    read_errors = _errors(_READ_ERRORS, ollama.OllamaError)
    return {
        "/api/chat": _generation("Ollama chat (streams NDJSON unless `stream` is false; an empty `messages` is the "
                                 "load call)", ollama.OllamaChatRequest, ollama.OllamaChatResponse, engine_header,
                                 ollama.OllamaError, ndjson=True),
        "/api/generate": _generation("Ollama generate (the prompt through the chat template, or `raw`; an empty "
                                     "prompt is the load call)", ollama.OllamaGenerateRequest,
                                     ollama.OllamaGenerateResponse, engine_header, ollama.OllamaError, ndjson=True),
        "/api/embed": _embedding("Ollama embeddings: per input the unit-length mean of the model's final hidden "
                                 "states over its tokens (no input, \"\" or []: the load call)",
                                 ollama.OllamaEmbedRequest, ollama.OllamaEmbedResponse, ollama.OllamaError),
        "/api/embeddings": _embedding("Ollama's older embeddings call: one prompt's mean final hidden state, not "
                                      "normalised (no prompt or \"\": the load call)", ollama.OllamaEmbeddingsRequest,
                                      ollama.OllamaEmbeddingsResponse, ollama.OllamaError),
        "/api/tags": {"get": {"summary": "Ollama: the local models (the one model and its aliases)",
                              "responses": {"200": _json(ollama.OllamaTags, "Models"), **read_errors}}},
        "/api/ps": {"get": {"summary": "Ollama: the loaded models (the one model)",
                            "responses": {"200": _json(ollama.OllamaRunning, "Models"), **read_errors}}},
        "/api/show": {"post": {
            "summary": "Ollama: the model's details, context length and capabilities",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref(ollama.OllamaShowRequest)}}},
            "responses": {"200": _json(ollama.OllamaShow, "The model"),
                          **_errors(_BODY_ERRORS, ollama.OllamaError)}}},
        "/api/version": {"get": {"summary": "Ollama: the API version this server follows",
                                 "responses": {"200": _json(ollama.OllamaVersion, "Version"), **read_errors}}},
        "/": {"get": {"summary": "Ollama's liveness text, \"Ollama is running\" (needs no key)", "security": [],
                      "responses": {"200": {"description": "Running", "content": {
                          "text/plain": {"schema": {"type": "string", "const": "Ollama is running"}}}}}}},
    }


def _tokenizer_paths() -> dict[str, Any]:
    """vLLM's (and llama.cpp's) tokenizer endpoints (gateway.http.tokenize)."""
    errors = _errors(_BODY_ERRORS)

    def post(summary: str, requests: tuple[type[BaseModel], ...], replies: tuple[type[BaseModel], ...]) -> dict:
        def one_of(models: tuple[type[BaseModel], ...]) -> dict[str, Any]:
            return _ref(models[0]) if len(models) == 1 else {"anyOf": [_ref(m) for m in models]}
        return {"post": {"summary": summary, "description": SEMANTIC_RULES,
                         "requestBody": {"required": True, "content": {"application/json": {"schema": one_of(requests)}}},
                         "responses": {"200": {"description": "Done", "content": {"application/json": {
                             "schema": one_of(replies)}}}, **errors}}}

    return {
        "/tokenize": post("A prompt's (vLLM: `prompt`), a conversation's through the chat template (vLLM: `messages`) "
                          "or llama.cpp's `content`'s token ids", (tokenize.TokenizeTextRequest, tokenize.TokenizeChatRequest,
                                                                 tokenize.TokenizeContentRequest),
                          (tokenize.Tokenized, tokenize.TokenizedContent)),
        "/detokenize": post("Token ids back to text", (tokenize.DetokenizeRequest,), (tokenize.Detokenized,)),
    }


def build_openapi(
    config: GatewayConfig = GatewayConfig(),
    engines: tuple[str, ...] = ("raw",),
    models: tuple[str, ...] = ("default",),
    fills_in_middle: bool = False,
    embedding_size: int = schemas.INT32_MAX,
    title: str = "Switchyard",
    version: str = "0.1.0",
) -> dict[str, Any]:
    inputs = [(m, "validation") for m in _REQUESTS] + [(m, "serialization") for m in _RESPONSES]
    _, defs = models_json_schema(inputs, ref_template=REF)
    _honoured(defs["$defs"], config, engines, models, fills_in_middle, embedding_size)
    model_param = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
    engine_header = {"type": "string", "pattern": _engine_pattern(engines)}
    health_503 = _json(schemas.Health, "Model not loaded, worker crashed, or draining for shutdown")
    paths = {
        "/v1/chat/completions": _generation("Chat completion", schemas.ChatCompletionRequest, schemas.ChatCompletion,
                                            engine_header),
        "/v1/completions": _generation("Text completion", schemas.CompletionRequest, schemas.Completion, engine_header),
        "/v1/messages": _generation("Anthropic Messages API (thinking, text and tool_use blocks)",
                                    anthropic_schemas.MessagesRequest, None, engine_header,
                                    anthropic_schemas.AnthropicErrorResponse),
        "/v1/messages/count_tokens": {"post": {
            "summary": "Anthropic token counting: the prompt's tokens through the model's chat template",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref(anthropic_schemas.CountTokensRequest)}}},
            "responses": {"200": _json(anthropic_schemas.TokenCount, "Input tokens"),
                          **_errors({k: v for k, v in _GENERATION_ERRORS.items() if k not in ("429", "504")},
                                    anthropic_schemas.AnthropicErrorResponse)},
        }},
        "/v1/responses": _generation("OpenAI Responses API (stateless: send the whole conversation as input)",
                                     responses_schemas.ResponsesRequest, None, engine_header),
        "/v1/responses/input_tokens": {"post": {
            "summary": "OpenAI input token counting: the prompt's tokens through the model's chat template",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref(responses_schemas.InputTokensRequest)}}},
            "responses": {"200": _json(responses_schemas.InputTokenCount, "Input tokens"),
                          **_errors({k: v for k, v in _GENERATION_ERRORS.items() if k not in ("429", "504")})},
        }},
        "/v1/models": _get("The served model", _json(schemas.ModelList, "Models"), _READ_ERRORS),
        "/v1/models/{model}": _get("One model by name", _json(schemas.ModelCard, "The model"),
                                   {**_READ_ERRORS, "404": "Unknown model"}, parameters=[model_param]),
        "/health": _get("Liveness and readiness", _json(schemas.Health, "Serving"), {}, security=[]),
        "/metrics": _get("Prometheus exposition", {"description": "Metrics",
                                                   "content": {"text/plain": {"schema": {"type": "string"}}}},
                         _READ_ERRORS),
        "/v1/router/stats": _get("Router and monitor statistics", _json(None, "Statistics"), _ADMIN_ERRORS),
        "/admin/reload": {"post": {
            "summary": "Re-read the policy file",
            "responses": {"200": _json(None, "Reloaded"), "422": _json(None, "Invalid policy; the old one stays"),
                          **_errors(_ADMIN_ERRORS)},
        }},
    }
    paths["/v1/embeddings"] = _embedding("OpenAI embeddings: per input the unit-length mean of the model's final "
                                         "hidden states over its tokens", embeddings.EmbeddingRequest,
                                         embeddings.EmbeddingList)
    paths.update(_ollama_paths(engine_header))
    paths.update(_tokenizer_paths())
    paths["/health"]["get"]["responses"]["503"] = health_503
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "OpenAI-compatible API of one local model with routed decoding engines."},
        "paths": paths,
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {API_KEY_SCHEME: {"type": "http", "scheme": "bearer"}},
        },
        "security": [{API_KEY_SCHEME: []}, {}],   # keys are optional unless the server was given some
    }
