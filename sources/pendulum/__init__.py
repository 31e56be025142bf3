"""The planar double-pendulum source: integrator, live plugin, reproduction of the paper."""

from __future__ import annotations

from idt_desk_sources.pendulum._source import PendulumSource

__all__ = ["PendulumSource"]
