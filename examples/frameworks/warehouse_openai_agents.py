"""The warehouse agent as an OpenAI Agents SDK `Agent`, driven by a deterministic scripted `Model`.

`careful` and `defective` are agents with a structured final output (`Claim`). Assaygate runs an
agent once per trial with `Runner.run`, the task as the input and the agent's MCP servers pointed
at the trial's proxy; the claim is `final_output`. Swap `ScriptedModel` for a real model name
(`model="gpt-4.1"`) and the agent is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, AgentOutputSchema, Model, ModelResponse, Usage, set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import BaseModel

from examples.frameworks.scripted import TOKENS_PER_TURN, next_step

set_tracing_disabled(True)  # no network: nothing is exported


class Claim(BaseModel):
    """The released claim (docs/mcp.md, "Claims and runners")."""

    status: str
    effect_id: str | None = None
    reason: str | None = None
    anomaly: bool | None = None


def _item(item: Any) -> dict[str, Any]:
    return item if isinstance(item, dict) else item.model_dump()


def _parsed(output: Any) -> Any:
    """A tool reply as the SDK hands it back: JSON text, or MCP content items holding JSON text."""
    try:
        value = json.loads(output) if isinstance(output, str) else output
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict) and value.get("type") in ("text", "input_text"):
        return _parsed(value.get("text"))
    return None if not isinstance(value, dict) or "error" in value else value


class ScriptedModel(Model):
    """A `Model` whose every turn is the scripted policy's next step (no network)."""

    def __init__(self, policy: str) -> None:
        self.policy = policy

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = (
            [{"role": "user", "content": input}]
            if isinstance(input, str)
            else [_item(i) for i in input]
        )
        task = json.loads(next(str(i["content"]) for i in items if i.get("role") == "user"))
        replies = [
            _parsed(i.get("output")) for i in items if i.get("type") == "function_call_output"
        ]
        step = next_step(self.policy, task, replies)
        n = len(replies)
        output: list[Any]
        if isinstance(step, dict):
            text = ResponseOutputText(text=json.dumps(step), type="output_text", annotations=[])
            output = [
                ResponseOutputMessage(
                    id=f"msg_{n}",
                    content=[text],
                    role="assistant",
                    status="completed",
                    type="message",
                )
            ]
        else:
            tool, args = step
            output = [
                ResponseFunctionToolCall(
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    name=tool,
                    arguments=json.dumps(args),
                    type="function_call",
                    status="completed",
                )
            ]
        # The usage a real model reports per turn; the SDK sums it into
        # `result.context_wrapper.usage`, which the runner reads for the assay's spend.
        usage = Usage(
            requests=1,
            input_tokens=TOKENS_PER_TURN - 20,
            output_tokens=20,
            total_tokens=TOKENS_PER_TURN,
        )
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def agent(policy: str) -> Agent[Any]:
    return Agent(
        name=f"warehouse-{policy}",
        instructions="Fulfil the warehouse task: ship the order or credit the customer.",
        model=ScriptedModel(policy),
        output_type=AgentOutputSchema(Claim, strict_json_schema=False),
    )


careful = agent("careful")
defective = agent("defective")
