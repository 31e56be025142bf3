"""Gymnasium + Stable-Baselines3 agents (HalfCheetah by default): the live source, training."""

from __future__ import annotations

from idt_desk_sources.gym._source import GymSource

__all__ = ["GymSource"]
