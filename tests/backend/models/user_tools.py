"""A user's own tools for the environment hook's tests (`module:attribute`): plain Python callables, as TRL's
GRPOTrainer(tools=[...]) takes them, and a whole Environment."""

from backend.models.environments import Environment


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [add]
LINES = Environment("lines", lambda line: None if "####" in line else "ok\n", max_turns=3, turn_tokens=16)
