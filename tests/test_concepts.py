"""The concepts page (``assets/docs/concepts.md``) is the one statement of the paper's terms:
every name it cites exists, and no file states P or ΔH otherwise."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "assets" / "docs" / "concepts.md"


def _cited() -> list[str]:
    return sorted(set(re.findall(r"`([a-z_][\w.]*:[A-Za-z_][\w.]*)`", PAGE.read_text())))


def test_the_concepts_page_is_in_the_sites_nav():
    assert "concepts.md" in (ROOT / "assets" / "mkdocs.yml").read_text()


@pytest.mark.parametrize("name", _cited())
def test_every_name_the_concepts_page_cites_is_importable(name):
    module, attr = name.split(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    assert obj is not None


def _texts():
    for folder, pattern in (("idt_desk", "**/*.py"), ("sources", "**/*.py"),
                            ("widgets", "**/*.py"), ("assets/docs", "*.md"), (".", "README.md")):
        for path in sorted((ROOT / folder).glob(pattern)):
            yield path, path.read_text(encoding="utf-8")


#: The forms of ΔH the concepts page allows (and its identity in terms of entropies).
#: (A passive system's H_f − H_b is H(S') − H(S); an agent's H(S') − H(S,A).)
_DH_OK = ("H_f − H_b", "H_f - H_b", "H(S'", "-0.", "−0.", "0")


def test_no_file_states_delta_h_or_p_otherwise():
    """ΔH = H_b − H_f stood in four docstrings and a page; P = I(S;S')/H(S,S') in two."""
    bad = []
    for path, text in _texts():
        for m in re.finditer(r"(?:ΔH|\\Delta H|\bdH)\s*=\s*([^,;.)\n]{1,30})", text):
            rhs = m.group(1).strip().strip("`$*")
            if not rhs.startswith(_DH_OK) and re.search(r"H_?[bf]|H\(", rhs):
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
        for m in re.finditer(r"\bP\s*=\s*I\(|/\s*H\(S,\s*S'\)|/\s*H\(S,\s*A,\s*S'\)", text):
            bad.append(f"{path.relative_to(ROOT)}: {text[m.start():m.start() + 40]!r}")
    assert not bad, "\n".join(bad)
