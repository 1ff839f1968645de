"""The demo (`make demo`): one agent's turns on the local stack, driven through the agent client
and the CLI's operations, as a newcomer would drive the product."""
