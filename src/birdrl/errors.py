"""The root of birdrl's exception tree: catch `BirdrlError` to catch everything we raise."""


class BirdrlError(Exception):
    """Base class of every error birdrl raises on purpose."""
