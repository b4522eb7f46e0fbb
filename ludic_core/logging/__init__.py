"""Loggers for training metrics."""

from ludic_core.logging.curves import curves_png, mean_band
from ludic_core.logging.loggers import ConsoleLogger, JsonlLogger, Logger, WandbLogger

__all__ = ["curves_png", "mean_band", "ConsoleLogger", "JsonlLogger", "Logger", "WandbLogger"]
