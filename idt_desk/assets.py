"""Where the shipped data lies: policies, recordings and sample data, found as package data.

The repository's ``assets/`` folder installs as the package ``idt_desk_assets`` (see
``pyproject.toml``), so :func:`path` finds the same files in a source checkout, an editable
install and a wheel installed anywhere.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["path"]


def path(*parts: str) -> Path:
    """The shipped file or folder ``assets/<parts...>`` as a filesystem path.

    Raises
    ------
    FileNotFoundError
        Nothing of that name was shipped.

    """
    p = Path(str(files("idt_desk_assets").joinpath(*parts)))
    if not p.exists():
        raise FileNotFoundError(f"IDT Desk ships no {'/'.join(parts) or 'assets'} ({p})")
    return p
