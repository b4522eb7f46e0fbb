"""Loggers for training metrics."""

from ludic_core.logging.loggers import ConsoleLogger, JsonlLogger, Logger, WandbLogger

__all__ = ["ConsoleLogger", "JsonlLogger", "Logger", "WandbLogger"]
