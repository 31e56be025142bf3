"""The documentation: the README is a short front door whose links land, and the pages under
assets/docs build into a site with no broken link or anchor (MkDocs in strict mode)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The README is a front door, not the manual: past this it is growing back into one.
FRONT_DOOR_LINES = 200


def _links(text: str) -> list[str]:
    """The relative targets of the Markdown links and images in ``text`` (code left out)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", t)]


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a page, as MkDocs (Python-Markdown's toc) makes them."""
    anchors = set()
    fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        m = re.match(r"#{1,6} (.*)", line)
        if m and not fence:
            slug = re.sub(r"[^\w\s-]", "", m.group(1).replace("`", "")).strip().lower()
            anchors.add(re.sub(r"[-\s]+", "-", slug))
    return anchors


def test_the_readme_is_a_front_door_with_both_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= FRONT_DOOR_LINES
    for marker in ("<!-- ci:launch-command -->", "<!-- ci:test-command -->"):
        after = text.split(marker, 1)[1].lstrip()
        assert after.startswith("```bash\npython3 -m venv .venv"), marker


def test_every_link_in_the_readme_lands_on_a_file_and_heading():
    links = _links(README.read_text())
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), link
        if anchor:
            assert anchor in _anchors(target), link


def test_the_link_checker_sees_a_broken_anchor(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Alarms you can trust: a `false-alarm` budget\n\n## Other\n")
    assert _anchors(page) == {"alarms-you-can-trust-a-false-alarm-budget", "other"}


@pytest.fixture(scope="module")
def mkdocs():
    """MkDocs of the test extra (the README's test command installs it)."""
    import mkdocs  # noqa: F401  (an ImportError fails the test: nothing is skipped)

    return [sys.executable, "-m", "mkdocs"]


def test_the_site_builds_strictly(mkdocs, tmp_path):
    proc = subprocess.run([*mkdocs, "build", "--strict", "-f", str(ROOT / "assets/mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pages = {p.stem for p in (ROOT / "assets/docs").glob("*.md")}
    built = {p.parent.name for p in (tmp_path / "site").glob("*/index.html")}
    assert pages - {"index"} <= built
    assert (tmp_path / "site/img/screenshot.png").is_file()


def test_a_broken_link_fails_the_strict_build(mkdocs, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](alarms.md#nowhere)\n")
    (docs / "alarms.md").write_text("# Alarms\n")
    (tmp_path / "mkdocs.yml").write_text(
        (ROOT / "assets/mkdocs.yml").read_text().split("nav:")[0].replace(
            "site_dir: ../out/site", f"site_dir: {tmp_path / 'site'}"))
    proc = subprocess.run([*mkdocs, "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "nowhere" in proc.stderr


def test_every_scheduler_option_says_a_cluster_runs_pickles(capsys):
    """A Dask scheduler exchanges pickles with the client: wherever ``--scheduler`` is offered
    (each reproduction's help, the README's extras table) the user is told to trust it."""
    from idt_desk.cli import main

    for name in ("pendulum", "cheetah", "dialogue"):
        with pytest.raises(SystemExit):
            main(["reproduce", name, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--scheduler" in text and "pickles" in text.split("--scheduler", 1)[1], name
    row = next(x for x in README.read_text().splitlines() if "--scheduler" in x)
    assert "pickles" in row and "trust" in row


def test_the_dialogue_offers_ollama_first_and_says_what_the_offline_extra_costs():
    """The llm extra compiles llama.cpp (44 min wall on a loaded machine where the README
    said 8.5 min): its cost is stated in CPU time, after the path that needs no install."""
    text = README.read_text()
    para = text[text.index("The LLM dialogue needs nothing more"):text.index("## Run the tests")]
    assert para.index("Ollama") < para.index('pip install -e ".[llm')
    assert "minutes of CPU time" in para


def test_the_layout_page_names_every_module():
    """``layout.md`` is read to find one's way: every module of the core, the sources and the
    widgets is named in it (it omitted limits, live/ranges, live/snapshot, cli/signals and
    four widgets), under its package's line."""
    import re

    text = (ROOT / "assets" / "docs" / "layout.md").read_text()
    block = text[text.index("```") + 3:text.index("```", text.index("```") + 3)]
    # Each package's entry runs from its name to the next entry at the same indent.
    entries = re.split(r"\n(?=  ?[a-z_]+/|  [a-z_]+\.py|[a-z_]+/)", block)

    def entry(name: str) -> str:
        return next((e for e in entries if e.strip().startswith(name)), "")

    missing = []
    for package, where in (("idt_desk", ""), ("sources", "sources/"), ("widgets", "widgets/")):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT / package)
            stem = rel.stem.strip("_")
            if stem in ("init", "main") or "__pycache__" in rel.parts:
                continue
            scope = entry(f"{rel.parts[0]}/") if package == "idt_desk" and len(rel.parts) > 1 \
                else entry(where) if where else block
            if not re.search(rf"\b{re.escape(stem)}\b", scope):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"layout.md does not name: {', '.join(missing)}"


def test_the_pages_say_how_many_tests_there_are_within_a_tenth(request):
    """testing.md said 725 tests when there were 751: the README and the tests page state the
    suite's size as "about N tests", N within 10 % of what pytest collects."""
    import re

    collected = len(request.session.items)
    if collected < 100:
        pytest.skip("a part of the suite was selected: its size is not the suite's")
    for page in (README, ROOT / "assets" / "docs" / "testing.md"):
        (n,) = {int(m.replace(",", "")) for m in re.findall(r"about ([\d,]+) tests",
                                                            page.read_text())}
        assert abs(n - collected) <= 0.1 * collected, (page.name, n, collected)


def test_the_readme_builds_llama_cpp_portably_wherever_it_installs_the_llm_extra():
    """Every README command that installs the llm extra sets the portable CMAKE_ARGS and the
    build's own pip cache, as the built-in backend's install hint does (one definition)."""
    from idt_desk_sources.dialogue._backends import BUILTIN_INSTALL, PIP_CACHE, PORTABLE_CMAKE_ARGS

    setting = f'export PIP_CACHE_DIR="{PIP_CACHE}" CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" && '
    assert BUILTIN_INSTALL.startswith(setting)
    lines = [line for line in README.read_text().splitlines() if "llm" in line
             and "pip install" in line and line.lstrip().startswith(("python3", "export"))]
    assert len(lines) == 2, lines  # the test command and the extras' install
    for line in lines:
        assert setting in line and line.index(setting) < line.index("pip install")
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_INT8=OFF"} <= set(PORTABLE_CMAKE_ARGS.split())
