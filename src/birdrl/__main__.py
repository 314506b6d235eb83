"""``python -m birdrl``: the command line (also how launchers such as ``accelerate launch -m
birdrl`` start it)."""

from birdrl.cli import app

if __name__ == "__main__":
    app()
