"""The warehouse agent as a LangGraph graph, driven by a deterministic scripted chat model.

`careful` and `defective` are compiled graphs: a model node and a tools node over
`MessagesState`. Assaygate invokes a graph once per trial with the task as the first message and
the trial's MCP tools in `config["configurable"]["mcp_tools"]`; the claim is the last message's
content (a JSON object). Swap `ScriptedModel` for a real chat model (`init_chat_model(...)`) and
the graph is unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

from examples.frameworks.scripted import TOKENS_PER_TURN, next_step


def _parsed(content: Any) -> Any:
    try:
        value = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        return None
    return None if isinstance(value, dict) and "error" in value else value


class ScriptedModel(BaseChatModel):
    """A chat model whose every turn is the scripted policy's next step (no network)."""

    policy: str

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        task = json.loads(str(messages[0].content))
        replies = [_parsed(m.content) for m in messages if isinstance(m, ToolMessage)]
        step = next_step(self.policy, task, replies)
        # Each turn reports the usage a real model would (a fixed count: TOKENS_PER_TURN), which
        # the runner reads for the assay's spend and token budget.
        usage = {
            "input_tokens": TOKENS_PER_TURN - 20,
            "output_tokens": 20,
            "total_tokens": TOKENS_PER_TURN,
        }
        if isinstance(step, dict):
            message = AIMessage(content=json.dumps(step), usage_metadata=usage)
        else:
            tool, args = step
            message = AIMessage(
                content="",
                tool_calls=[{"name": tool, "args": args, "id": f"call_{len(replies)}"}],
                usage_metadata=usage,
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def build(model: BaseChatModel) -> Any:
    async def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def act(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        tools = {t.name: t for t in config["configurable"]["mcp_tools"]}
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        out = []
        for call in last.tool_calls:
            reply = await tools[call["name"]].ainvoke(call["args"])
            out.append(ToolMessage(content=str(reply), tool_call_id=call["id"]))
        return {"messages": out}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "act" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("think", think)
    graph.add_node("act", act)
    graph.add_edge(START, "think")
    graph.add_conditional_edges("think", route, ["act", END])
    graph.add_edge("act", "think")
    return graph.compile()


careful = build(ScriptedModel(policy="careful"))
defective = build(ScriptedModel(policy="defective"))
