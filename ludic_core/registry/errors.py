"""The one error of naming components: a config names what cannot be found or built."""

__all__ = ["ComponentError"]


class ComponentError(ValueError):
    """A config names a component that cannot be found or built."""
