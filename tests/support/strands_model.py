"""A scripted model for a real `strands.Agent`: each step of the script sees the conversation so
far and answers a tool call `(name, input)` or a final text. The agent's own event loop runs the
tools and records their results in `agent.messages`, exactly as with a hosted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands.models.model import Model

Step = Callable[[list[dict[str, Any]]], "tuple[str, dict[str, Any]] | str"]
POLL_PAUSE_SECONDS = 0.2


class ScriptedModel(Model):
    def __init__(self, steps: list[Step | Poll]) -> None:
        self.steps = list(steps)
        self.tool_specs: list[Any] = []  # what the agent offered the model, per request
        self._uses = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the script answers no structured output")
        yield  # an async generator, like the interface's

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.tool_specs.append(tool_specs)
        while self.steps and isinstance(self.steps[0], Poll) and self.steps[0].done(messages):
            self.steps.pop(0)
        if self.steps and isinstance(self.steps[0], Poll):
            if self.steps[0].calls:
                await asyncio.sleep(POLL_PAUSE_SECONDS)  # between polls of a state, not a deadline
            step = self.steps[0](messages)
        else:
            step = self.steps.pop(0)(messages) if self.steps else "done"
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(step, str):
            yield {"contentBlockDelta": {"delta": {"text": step}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        name, tool_input = step
        self._uses += 1
        yield {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": f"use-{self._uses}"}}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(tool_input)}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def call(name: str, tool_input: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]) -> Step:
    """A step calling `name`; `tool_input` may be built from the last tool result (its JSON)."""

    def step(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        return name, tool_input(last_answer(messages)) if callable(tool_input) else tool_input

    return step


class Poll:
    """A step repeated while the last answer's status is `running` (a job polled to its end): its
    input is built from the answer that preceded the first poll."""

    def __init__(self, name: str, tool_input: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.name, self.tool_input = name, tool_input
        self.calls = 0
        self.input: dict[str, Any] | None = None

    def done(self, messages: list[dict[str, Any]]) -> bool:
        return self.calls > 0 and last_answer(messages).get("status") != "running"

    def __call__(self, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        if self.input is None:
            self.input = self.tool_input(last_answer(messages))
        self.calls += 1
        return self.name, self.input


def poll(name: str, tool_input: Callable[[dict[str, Any]], dict[str, Any]]) -> Poll:
    return Poll(name, tool_input)


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every toolResult the agent recorded, in order."""
    return [block["toolResult"] for m in messages for block in m["content"] if "toolResult" in block]


def last_answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The sandbox answer (JSON) of the last tool result (its first text block, after the class
    line on an error)."""
    text = tool_results(messages)[-1]["content"][0]["text"]
    return dict(json.loads(text if text.startswith("{") else text.split("\n", 1)[1]))
