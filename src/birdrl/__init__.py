"""birdrl: agentic RL over stateful database environments."""

__version__ = "0.1.0"
