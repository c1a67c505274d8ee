"""Agent loops for the agent-loop input check: one that returns an output per turn, one that returns one."""

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput


class OutputPerTurnAgentLoop(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> list[AgentLoopOutput]:
        raise NotImplementedError  # never run: the check reads the annotation


class OptionalOutputsAgentLoop(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> "AgentLoopOutput | list[AgentLoopOutput] | None":
        raise NotImplementedError


class WholeSessionAgentLoop(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        raise NotImplementedError
