"""moye.analysis: what layouts cost on the hardware, worked out on the host."""
from .access import AccessReport, SideReport, analyze

__all__ = ["analyze", "AccessReport", "SideReport"]
