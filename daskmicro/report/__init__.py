"""Run reports: JSON metrics of an anonymization run."""

from .run import Report

__all__ = ["Report"]
