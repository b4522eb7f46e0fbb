"""Agents: chat client + context + parser (+ tools) behind one `act` call."""

from ludic_core.agents.agent import Agent, AgentAction, AgentOptions
from ludic_core.agents.react_agent import ReActAgent
from ludic_core.agents.tool_agent import ToolAgent, ToolAgentOptions
from ludic_core.agents.tools import ToolCall, function_schema

__all__ = ["Agent", "AgentAction", "AgentOptions", "ToolAgent", "ToolAgentOptions", "ReActAgent", "ToolCall",
           "function_schema"]
