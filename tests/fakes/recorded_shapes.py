"""Answers as the providers really send them: bodies and streams copied from where they are recorded.

Each constant names its source (repository, path, and the test that recorded it). OpenAI's were recorded from the
live API by openai-python's own test suite (inline-snapshot); Anthropic's are anthropic-sdk-python's streaming
fixtures; OpenRouter's and vLLM's in-band error objects come from their documentation and server code. The fake
provider (tests/fakes/model_server.py) replays them byte for byte with `replay(...)`; nothing here is edited, only
the whitespace between SSE events is as the source has it.
"""

from __future__ import annotations

import json
from typing import Any

# -- OpenAI chat completions, JSON --------------------------------------------------------------------------------

# openai/openai-python tests/lib/chat/test_completions.py, test_parse_pydantic_model_refusal: no content, a refusal.
OPENAI_REFUSAL_JSON = r"""{"id": "chatcmpl-ABfvwoKVWPQj2UPlAcAKM7s40GsRx", "object": "chat.completion", "created": 1727346164, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "I'm very sorry, but I can't assist with that."}, "logprobs": null, "finish_reason": "stop"}], "usage": {"prompt_tokens": 79, "completion_tokens": 12, "total_tokens": 91, "completion_tokens_details": {"reasoning_tokens": 0}}, "system_fingerprint": "fp_5050236cbd"}"""  # noqa: E501
OPENAI_REFUSAL_TEXT = "I'm very sorry, but I can't assist with that."

# openai/openai-python tests/lib/chat/test_completions.py, test_parse_pydantic_tool: an answer made only of a tool call.
OPENAI_TOOL_CALLS_JSON = r"""{"id": "chatcmpl-ABfvx6Z4dchiW2nya1N8KMsHFrQRE", "object": "chat.completion", "created": 1727346165, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_Y6qJ7ofLgOrBnMD5WbVAeiRV", "type": "function", "function": {"name": "GetWeatherArgs", "arguments": "{\"city\":\"Edinburgh\",\"country\":\"UK\",\"units\":\"c\"}"}}], "refusal": null}, "logprobs": null, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 76, "completion_tokens": 24, "total_tokens": 100, "completion_tokens_details": {"reasoning_tokens": 0}}, "system_fingerprint": "fp_e45dabd248"}"""  # noqa: E501

# openai/openai-python tests/lib/chat/test_completions.py, test_parse_max_tokens_reached: cut after one token.
OPENAI_LENGTH_JSON = r"""{"id": "chatcmpl-ABfvvX7eB1KsfeZj8VcF3z7G7SbaA", "object": "chat.completion", "created": 1727346163, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"", "refusal": null}, "logprobs": null, "finish_reason": "length"}], "usage": {"prompt_tokens": 79, "completion_tokens": 1, "total_tokens": 80, "completion_tokens_details": {"reasoning_tokens": 0}}, "system_fingerprint": "fp_7568d46099"}"""  # noqa: E501
OPENAI_LENGTH_TEXT = '{"'

# openai/openai-python tests/lib/chat/test_content_filter.py, test_parse_content_filter_completion: stopped by the
# content filter before any content.
OPENAI_CONTENT_FILTER_JSON = r"""{"id": "chatcmpl-example", "object": "chat.completion", "created": 0, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "message": {"role": "assistant", "content": null}, "finish_reason": "content_filter"}], "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}}"""  # noqa: E501

# -- OpenAI chat completions, streams -----------------------------------------------------------------------------

# openai/openai-python .inline-snapshot/external/ca015b8b1ebaac98be76f2f855f8694b77f608de5e2a3799276be06ce3fbb15b.bin
# (tests/lib/chat/test_completions_streaming.py, test_parse_pydantic_model_refusal): the refusal arrives as
# `delta.refusal` pieces, finish_reason "stop".
OPENAI_REFUSAL_STREAM = r"""data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":"I'm"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" sorry"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":","},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" but"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" I"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" can't"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" assist"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" with"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" that"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":" request"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"refusal":"."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}

data: {"id":"chatcmpl-9tXmMGFPkLS0t0u0895fzYOblnfYa","object":"chat.completion.chunk","created":1723024914,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[],"usage":{"prompt_tokens":17,"completion_tokens":12,"total_tokens":29}}

data: [DONE]

"""  # noqa: E501
OPENAI_REFUSAL_STREAM_TEXT = "I'm sorry, but I can't assist with that request."

# openai/openai-python .inline-snapshot/external/69363a555f8ea9b6eee0bb022af0afcd22d4f0e85418ab38ee24d2a570a84ff0.bin
# (test_completions_streaming.py, test_parse_max_tokens_reached): one token, then finish_reason "length".
OPENAI_LENGTH_STREAM = r"""data: {"id":"chatcmpl-9tXjkSxyTVUSWZRJFSZJgWBHzh2c3","object":"chat.completion.chunk","created":1723024752,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjkSxyTVUSWZRJFSZJgWBHzh2c3","object":"chat.completion.chunk","created":1723024752,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"content":"{\""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjkSxyTVUSWZRJFSZJgWBHzh2c3","object":"chat.completion.chunk","created":1723024752,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}

data: {"id":"chatcmpl-9tXjkSxyTVUSWZRJFSZJgWBHzh2c3","object":"chat.completion.chunk","created":1723024752,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[],"usage":{"prompt_tokens":17,"completion_tokens":1,"total_tokens":18}}

data: [DONE]

"""  # noqa: E501

# openai/openai-python .inline-snapshot/external/24aaf30663f9a568a0e77970b4fd3deafe041da94d541071009596234d8c84a6.bin
# (test_completions_streaming.py, test_parse_pydantic_tool): only `delta.tool_calls`, finish_reason "tool_calls".
OPENAI_TOOL_CALLS_STREAM = r"""data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_7PhhveOvvpPK53s1fV8TWhoV","type":"function","function":{"name":"GetWeatherArgs","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"city"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Ed"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"inburgh"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\",\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"country"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"GB"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\",\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"units"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"c"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-9tXjnXkjzholyB3ceNegQC7g5zP57","object":"chat.completion.chunk","created":1723024755,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_845eaabc1f","choices":[],"usage":{"prompt_tokens":76,"completion_tokens":24,"total_tokens":100}}

data: [DONE]

"""  # noqa: E501

# openai/openai-python tests/lib/chat/test_content_filter.py, test_stream_content_filter_completion[after_content]:
# some content, then finish_reason "content_filter" (the bytes that test builds: json.dumps of each event).
OPENAI_CONTENT_FILTER_STREAM = r"""data: {"id": "chatcmpl-example", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "{\"value\": \"example"}, "finish_reason": null}]}

data: {"id": "chatcmpl-example", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": "content_filter"}]}

data: [DONE]

"""  # noqa: E501
OPENAI_CONTENT_FILTER_PARTIAL = '{"value": "example'

# -- errors inside a 200 answer (OpenAI-compatible servers) -------------------------------------------------------

# OpenRouter's mid-stream error, the example of "Streaming Error Formats" > "Mid-Stream Errors" in
# https://openrouter.ai/docs/api/reference/errors-and-debugging (llms-full.txt; mirrored in
# patrickcarmichael/claude-docs docs/ai-platforms/openrouter/formatted/178-streaming-error-formats.md): the error at
# the top level beside a choice with finish_reason "error"; the stream ends after it.
OPENROUTER_MIDSTREAM_ERROR = r"""data: {"id":"cmpl-abc123","object":"chat.completion.chunk","created":1234567890,"model":"gpt-3.5-turbo","provider":"openai","error":{"code":"server_error","message":"Provider disconnected"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}

"""  # noqa: E501


def openrouter_error_body(code: int, message: str) -> str:
    """OpenRouter's ErrorResponse `{"error": {"code": number, "message": string}}` (same page, "API Errors"),
    which it sends with status 200 when the error happens after the model started: "emitted in the response body".
    The codes and their meanings are the page's list (429 rate limited, 502 model down, 503 no provider ...)."""
    return json.dumps({"error": {"code": code, "message": message}})


def vllm_error(message: str, err_type: str, code: int) -> dict[str, Any]:
    """vLLM's ErrorResponse: vllm-project/vllm vllm/entrypoints/openai/protocol.py (before ErrorInfo)
    `object: str = "error"; message: str; type: str; param: Optional[str] = None; code: int`."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def vllm_stream_error(message: str, err_type: str = "InternalServerError", code: int = 500) -> str:
    """The SSE event vLLM's chat stream yields on a failure: vllm-project/vllm
    vllm/entrypoints/openai/serving_engine.py (commit 0030b9ff) `create_streaming_error_response` =
    json.dumps({"error": ErrorResponse(...).model_dump()}), sent as `data: ...` with no [DONE] after it."""
    return f"data: {json.dumps({'error': vllm_error(message, err_type, code)})}\n\n"


def vllm_bare_error(message: str, err_type: str = "InternalServerError", code: int = 500) -> str:
    """The bare `{"object": "error", ...}` object (vLLM's api_server body, `ErrorResponse.model_dump()`), as servers
    built on it put it into a 200 body or a stream event."""
    return json.dumps(vllm_error(message, err_type, code))


# -- Anthropic messages, streams ----------------------------------------------------------------------------------

# anthropics/anthropic-sdk-python tests/lib/streaming/fixtures/refusal_response.txt: an empty text block, then
# stop_reason "refusal" (with stop_details).
ANTHROPIC_REFUSAL_STREAM = r"""event: message_start
data: {"type":"message_start","message":{"id":"msg_01RefusalTestMessage123456789","type":"message","role":"assistant","content":[],"model":"claude-opus-4-7","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":"cyber","explanation":"This request was refused due to policy."}},"usage":{"output_tokens":120,"output_tokens_details":{"thinking_tokens":67}}}

event: message_stop
data: {"type":"message_stop"}
"""  # noqa: E501

# anthropics/anthropic-sdk-python tests/lib/streaming/fixtures/tool_use_response.txt: a sentence, then a tool_use
# block, stop_reason "tool_use".
ANTHROPIC_TOOL_USE_STREAM = r"""event: message_start
data: {"type":"message_start","message":{"id":"msg_019Q1hrJbZG26Fb9BQhrkHEr","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":377,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'ll check the current weather in Paris for you."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01NRLabsLyVHZPKxbKvkfSMn","name":"get_weather","caller":{"type":"direct"},"input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"locati"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"on\": \"P"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ar"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"is\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":65}}

event: message_stop
data: {"type":"message_stop"}"""  # noqa: E501
ANTHROPIC_TOOL_USE_TEXT = "I'll check the current weather in Paris for you."

# anthropics/anthropic-sdk-python tests/lib/streaming/fixtures/incomplete_partial_json_response.txt: text, then a
# tool_use block cut mid-JSON by stop_reason "max_tokens" (the odd spaces before line ends are the fixture's own).
ANTHROPIC_MAX_TOKENS_STREAM = r"""event: message_start
data: {"type":"message_start","message":{"id":"msg_01UdjYBBipA9omjYhicnevgq","type":"message","role":"assistant","model":"claude-3-7-sonnet-20250219","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":450,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}          }

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}         }

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I"}       }

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'ll create a comprehensive tax guide for"}        }

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" someone with multiple W2s an"}        }

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"d save it in a file called taxes.txt. Let"} }

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" me do that for you now."}           }

event: content_block_stop
data: {"type":"content_block_stop","index":0 }

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01EKqbqmZrGRXy18eN7m9kvY","name":"make_file","input":{}}     }

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}       }

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"filename\": \"taxes.txt"}   }

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\", \"lines_of_text\": [\n\"# COMPREHENSIVE TAX GUIDE FOR INDIVIDUALS WITH MULTIPLE W-2s\",\n\"\",\n\"## INTRODUCTION\",\n\"\","}        }

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\n\"Filing taxes"}               }

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":124}    }

event: message_stop
data: {"type":"message_stop" }"""  # noqa: E501
ANTHROPIC_MAX_TOKENS_TEXT = (
    "I'll create a comprehensive tax guide for someone with multiple W2s and save it in a file called taxes.txt. "
    "Let me do that for you now."
)

# anthropics/anthropic-sdk-python tests/test_streaming.py, test_error_type: the error event inside a 200 stream.
ANTHROPIC_OVERLOADED_EVENT = (
    'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)
#: The same error object as a whole 200 body (what a proxy in front of Anthropic may answer).
ANTHROPIC_OVERLOADED_BODY = ANTHROPIC_OVERLOADED_EVENT.split("data: ", 1)[1].strip()

# -- Anthropic messages, JSON -------------------------------------------------------------------------------------

# anthropics/anthropic-sdk-python tests/lib/tools/test_runners.py, snapshots["basic"]["responses"][0] (recorded from
# the live API): an answer made only of a tool_use block.
ANTHROPIC_TOOL_ONLY_JSON = r"""{"model": "claude-haiku-4-5-20251001", "id": "msg_0133AjAuLSKXatUZqNkpALPx", "type": "message", "role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01DGiQScbZKPwUBYN79rFUb8", "name": "get_weather", "input": {"location": "San Francisco, CA", "units": "f"}}], "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 656, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}, "output_tokens": 74, "service_tier": "standard"}}"""  # noqa: E501


def anthropic_message_of(stream: str) -> str:
    """The JSON Message a recorded Anthropic stream stands for, folded the way the SDK's own accumulator
    (anthropic.lib.streaming accumulate_event) folds it: message_start's message, each content block with its
    deltas applied, message_delta's stop_reason / stop_sequence / stop_details and output usage. This is how the
    fake answers a non-streaming request with a recorded stream (the SDKs record refusals only as streams)."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for block in stream.strip().split("\n\n"):
        data_lines = [line[len("data:"):].strip() for line in block.splitlines() if line.startswith("data:")]
        if not data_lines:
            continue
        event = json.loads("\n".join(data_lines))
        kind = event.get("type")
        if kind == "message_start":
            message = dict(event["message"])
            message["content"] = []
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block_ = message["content"][event["index"]]
            delta = event["delta"]
            if delta["type"] == "text_delta":
                block_["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message.get("usage", {}), **event.get("usage", {})}
    for index, raw in partial.items():
        try:
            message["content"][index]["input"] = json.loads(raw)
        except json.JSONDecodeError:  # cut by max_tokens: the SDK leaves the input as parsed so far
            pass
    return json.dumps(message)
