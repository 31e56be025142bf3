"""The package as a user gets it: the wheel built from this checkout, installed somewhere else.

The wheel must hold only ``idt_desk``, ``idt_desk_sources``, ``idt_desk_widgets`` and
``idt_desk_assets`` (nothing generic such as ``sources`` or ``widgets`` at the top of
site-packages) and every shipped data file; installed into a fresh virtual environment outside
the checkout it must run headless sessions from its own files, the shipped RL policy included.

The fresh environment gets the dependencies (numpy, torch, gymnasium...) from the running
interpreter: a ``.pth`` file in its site-packages lists this interpreter's site-packages.
Python processes ``.pth`` files only in site directories proper, not in directories a ``.pth``
line adds, so an editable install of this checkout there (its ``__editable__`` finder) stays
inactive; the tests check that ``idt_desk`` really imports from the fresh environment.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
#: The repository's folders and the packages they install as.
FOLDERS = {"idt_desk": "idt_desk", "sources": "idt_desk_sources", "widgets": "idt_desk_widgets",
           "assets": "idt_desk_assets"}
TOP_PACKAGES = set(FOLDERS.values())
#: Steps per headless session: a few thousand transitions, enough for tens of windows.
STEPS = 3000


def _shipped_data() -> list[str]:
    """The shipped data files, relative to ``assets/``: policies, the recording, the sample."""
    assets = ROOT / "assets"
    files = sorted(
        [*assets.glob("policies/*.zip"), *assets.glob("policies/*.json"),
         *assets.glob("policies/*.pkl"),
         *(p for p in (assets / "recordings" / "dialogue-smollm2-contradictions").rglob("*")
           if p.is_file()),
         assets / "data" / "DP_Sample.csv.gz"])
    return [p.relative_to(assets).as_posix() for p in files]


def _ignore(directory: str, names: list[str]) -> set[str]:
    """What a clean clone would not have: VCS, venvs, caches, build outputs, ``out/``..."""
    skip = {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))}
    if Path(directory).resolve() == ROOT:
        skip |= {n for n in names
                 if n.startswith(".") or n.endswith(".egg-info")
                 or n in {"out", "build", "dist", "runs", "MUJOCO_LOG.TXT"}}
    return skip


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
        f"\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


@dataclass(frozen=True)
class Installed:
    """The built wheel and the fresh environment it is installed in."""

    wheel: Path
    names: list[str]            # the wheel's members
    record: list[str]           # the paths its RECORD lists
    python: Path                # the fresh environment's interpreter
    bindir: Path
    site_packages: Path         # the fresh environment's own site-packages
    work: Path                  # a working directory outside the checkout
    env: dict[str, str]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel").resolve()
    assert not base.is_relative_to(ROOT), f"pytest's tmp dir {base} lies inside the checkout"

    # Build from a copy of the checkout: an in-tree build would write build/ and *.egg-info
    # into the working tree, and setuptools' build/lib keeps modules from earlier builds.
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(dist), str(src)], cwd=base)
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
        records = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
        assert len(records) == 1, records
        record = [row[0] for row in csv.reader(io.StringIO(z.read(records[0]).decode()))
                  if row]

    # A fresh environment; the wheel goes in before the .pth below exists, so pip sees
    # nothing of the running environment's packages (this checkout's install among them).
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    site_packages = Path(_run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        cwd=base).stdout.strip()).resolve()
    assert site_packages.is_relative_to(env_dir), site_packages
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "-q", str(wheels[0])], cwd=base)
    parents = dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib"),
                             sysconfig.get_path("platlib")])
    (site_packages / "_idt_desk_test_deps.pth").write_text(
        "".join(f"{p}\n" for p in parents if Path(p).is_dir()))

    env = {k: v for k, v in os.environ.items()
           if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH"}}
    env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    work = base / "work"
    work.mkdir()
    return Installed(wheels[0], names, record, python, bindir, site_packages, work, env)


def _session(inst: Installed, source: str, name: str) -> tuple[dict, object]:
    """``idt-desk run`` through the installed console script, in the outside directory."""
    rec = inst.work / name
    script = inst.bindir / ("idt-desk.exe" if os.name == "nt" else "idt-desk")
    assert script.is_file(), "the wheel installs no idt-desk console script"
    proc = _run([str(script), "run", "--source", source, "--steps", str(STEPS), "--quiet",
                 "--record", str(rec)], cwd=inst.work, env=inst.env)
    assert f"{source}: {STEPS} transitions" in proc.stdout, proc.stdout

    from idt_desk import load_recording

    recording = load_recording(rec)
    assert recording.complete, recording.warnings
    assert len(recording.transitions) == STEPS
    assert len(recording.windows) > 10
    assert recording.config["session"]["source"] == source
    assert recording.config["n_transitions"] == STEPS
    return recording.config, recording


# -- the wheel's contents ---------------------------------------------------------------------


def test_wheel_has_only_the_four_packages_at_the_top(installed: Installed):
    assert sorted(installed.record) == sorted(installed.names)
    tops = {n.split("/", 1)[0] for n in installed.record}
    dist_infos = {t for t in tops if t.endswith(".dist-info")}
    assert len(dist_infos) == 1 and re.fullmatch(r"idt_desk-[^/-]+\.dist-info",
                                                 next(iter(dist_infos))), dist_infos
    assert tops - dist_infos == TOP_PACKAGES
    for name in installed.record:
        assert "__pycache__" not in name and not name.endswith(".pyc"), name
    assert installed.wheel.name.endswith("-py3-none-any.whl"), installed.wheel.name
    assert "idt_desk/py.typed" in installed.names  # PEP 561: type checkers read the hints


def test_wheel_holds_every_module_of_the_checkout(installed: Installed):
    wanted = set()
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                wanted.add(f"{package}/{path.relative_to(ROOT / folder).as_posix()}")
    assert wanted, "no modules found in the checkout"
    assert sorted(wanted - set(installed.record)) == []


def test_wheel_holds_the_shipped_data(installed: Installed):
    shipped = _shipped_data()
    assert sum(n.startswith("policies/") and n.endswith(".zip") for n in shipped) >= 1
    assert sum(n.startswith("recordings/") for n in shipped) >= 4
    assert "data/DP_Sample.csv.gz" in shipped
    with zipfile.ZipFile(installed.wheel) as z:
        sizes = {i.filename: i.file_size for i in z.infolist()}
    for name in shipped:
        member = f"idt_desk_assets/{name}"
        assert member in sizes, f"{member} missing from the wheel"
        assert sizes[member] == (ROOT / "assets" / name).stat().st_size, member
    # Each policy comes with its model card (the default policy is chosen by the cards).
    zips = {n[:-4] for n in shipped if n.startswith("policies/") and n.endswith(".zip")}
    assert zips == {n[:-5] for n in shipped if n.startswith("policies/") and n.endswith(".json")}


# -- installed in a fresh environment ---------------------------------------------------------


def test_fresh_environment_imports_its_own_copy(installed: Installed):
    probe = ("import importlib.util as u, json; import idt_desk, idt_desk.assets as a; "
             "print(json.dumps({'file': idt_desk.__file__, 'policies': str(a.path('policies')),"
             " 'origins': {n: u.find_spec(n).origin for n in "
             "('idt_desk_sources', 'idt_desk_widgets', 'idt_desk_assets')},"
             " 'generic': [n for n in ('sources', 'widgets', 'assets') "
             "if u.find_spec(n) is not None]}))")
    out = json.loads(_run([str(installed.python), "-c", probe], cwd=installed.work,
                          env=installed.env).stdout)
    sp = installed.site_packages
    for origin in [out["file"], out["policies"], *out["origins"].values()]:
        assert Path(origin).resolve().is_relative_to(sp), (origin, sp)
        assert not Path(origin).resolve().is_relative_to(ROOT), origin
    assert out["generic"] == []
    # Nothing but the four packages and their dist-info went into the fresh site-packages.
    entries = {p.name for p in sp.iterdir()} - {"_idt_desk_test_deps.pth", "__pycache__"}
    infos = {e for e in entries if e.endswith(".dist-info")}
    assert len(infos) == 1 and entries - infos == TOP_PACKAGES, sorted(entries)


def test_pendulum_session_runs_from_the_wheel(installed: Installed):
    config, _ = _session(installed, "pendulum", "pendulum-rec")
    assert config["source"]["name"] == "pendulum"


def test_gym_session_uses_the_installed_default_policy(installed: Installed):
    config, _ = _session(installed, "gym", "gym-rec")
    policy = Path(config["session"]["settings"]["policy"]).resolve()
    assert policy.is_file()
    assert policy.is_relative_to(installed.site_packages / "idt_desk_assets" / "policies"), policy
    assert f"policies/{policy.name}" in _shipped_data()
    assert Path(config["source"]["details"]["policy"]).resolve() == policy


# -- pyproject's package list -----------------------------------------------------------------


def test_pyproject_packages_name_every_package_folder():
    tool = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    package_dir = tool.get("package-dir", {})
    assert package_dir == {v: k for k, v in FOLDERS.items() if k != v}
    declared = tool["packages"]
    assert len(declared) == len(set(declared)), "packages lists a name twice"

    found = {"idt_desk_assets"}
    for folder, package in FOLDERS.items():
        if folder == "assets":
            continue
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *rel)))
        # A folder of modules without __init__.py would silently stay out of the wheel.
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                assert (path.parent / "__init__.py").is_file(), f"{path.parent} has no __init__.py"
    assert (ROOT / "assets" / "__init__.py").is_file()
    assert sorted(set(declared) - found) == [], "packages names folders that do not exist"
    assert sorted(found - set(declared)) == [], "package folders missing from packages"
