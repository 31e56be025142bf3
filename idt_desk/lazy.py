"""Names a package offers, imported from their modules on first use (PEP 562).

``import idt_desk`` (and ``idt_desk.recordings``, ``idt_desk.plugin``) must not pay for numpy's,
pandas' and numba's import time before a name is used: ``idt-desk --help`` and a listing of
runs start light. A package lists where each of its names lives and takes its module-level
``__getattr__`` and ``__dir__`` from :func:`lazy_names`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, where: Mapping[str, str], namespace: dict[str, Any], *,
               modules: Mapping[str, str] | None = None, hint: str = ""
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``.

    ``where``: each name's module; ``modules``: names that are modules themselves;
    ``namespace``: the package's ``globals()`` (a name found is kept there, so the next
    look-up is a plain one); ``hint``: appended to the error for an unknown name.
    """
    modules = dict(modules or {})
    names = sorted([*where, *modules])

    def __getattr__(name: str) -> Any:
        if name in modules:
            value = importlib.import_module(modules[name])
        elif name in where:
            value = getattr(importlib.import_module(where[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}{hint}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
