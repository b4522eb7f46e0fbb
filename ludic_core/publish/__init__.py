"""Weight publishing from the trainer to inference."""

from ludic_core.publish.base import InProcessPublisher, PolicyPublisher

__all__ = ["InProcessPublisher", "PolicyPublisher"]
