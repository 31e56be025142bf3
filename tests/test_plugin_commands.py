"""Commands contributed through the ``idt_desk.commands`` entry points: a toy plugin under a
core parent and at top level, a broken one that is listed and reported but never crashes the
command line, names that clash with the core and are skipped, and the four built-in ones."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest

from idt_desk.live import plugins

from .cli_call import call as _call

TOY = '''
"""A toy command contributed by a test plugin."""

HELP = "count toys (a test plugin)"


def add_arguments(parser):
    parser.add_argument("--toys", type=int, default=1)
    parser.set_defaults(func=run)


def run(args):
    print(f"toy ran with {args.toys} toys")
    return 0
'''

BROKEN = '''
raise ImportError("needs the frobnicator")
'''

RAISES_IN_ADD_ARGUMENTS = '''
"""A command whose add_arguments raises."""

HELP = "explodes when asked for its options"


def add_arguments(parser):
    parser.add_argument("--first")
    raise RuntimeError("option table missing")
'''

NO_FUNC = '''
"""A command that forgets to set func."""

HELP = "sets no func"


def add_arguments(parser):
    parser.add_argument("--x")
'''

CLASH = '''
"""Must never be imported: every entry point naming it clashes with the core."""

HELP = "the impostor"


def add_arguments(parser):
    parser.add_argument("--impostor-option")
    parser.set_defaults(func=lambda args: 0)
'''

MODULES = {"idt_toy_cmd": TOY, "idt_broken_cmd": BROKEN,
           "idt_raising_cmd": RAISES_IN_ADD_ARGUMENTS, "idt_nofunc_cmd": NO_FUNC,
           "idt_clash_cmd": CLASH}

#: Contributed commands (entry-point name -> module) the toy plugin registers.
TOY_COMMANDS = {
    "bench.toy": "idt_toy_cmd",
    "toy": "idt_toy_cmd",
    "bench.broken": "idt_broken_cmd",
    "reproduce.raising": "idt_raising_cmd",
    "nofunc": "idt_nofunc_cmd",
    "gui": "idt_clash_cmd",
    "bench.engine": "idt_clash_cmd",
    "reproduce": "idt_clash_cmd",
    "foo.bar": "idt_clash_cmd",
    "bench.a.b": "idt_clash_cmd",
}

BROKEN_MESSAGE = ("idt-desk bench: error: command 'bench.broken' (idt_broken_cmd) failed to "
                  "load: ImportError: needs the frobnicator")

@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    """The toy plugin's modules on sys.path and its commands as the installed entry points."""
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [EntryPoint(name, value, plugins.COMMANDS_GROUP) for name, value in TOY_COMMANDS.items()]
    real = plugins.entry_points

    def fake_entry_points(group: str):
        # The installed commands first (the GUI's among them), then the toy plugin's.
        return ([*real(group=group), *eps] if group == plugins.COMMANDS_GROUP
                else real(group=group))

    monkeypatch.setattr(plugins, "entry_points", fake_entry_points)
    plugins.discover_commands(refresh=True)
    yield
    monkeypatch.undo()
    for name in MODULES:
        sys.modules.pop(name, None)
    plugins.discover_commands(refresh=True)


def test_a_contributed_command_runs_under_its_core_parent_and_at_top_level(toy_plugin):
    rc, out, _ = _call(["bench", "--help"])
    assert rc == 0 and "count toys (a test plugin)" in out
    assert "engine" in out and "memory" in out  # the core children stay
    rc, out, _ = _call(["bench", "toy", "--help"])
    assert rc == 0 and "usage: idt-desk bench toy" in out and "--toys" in out
    assert "A toy command contributed by a test plugin." in out  # docstring = description
    assert _call(["bench", "toy", "--toys", "3"]) == (0, "toy ran with 3 toys\n", "")
    rc, out, _ = _call(["--help"])
    assert rc == 0 and "toy" in out and "count toys (a test plugin)" in out
    assert _call(["toy"]) == (0, "toy ran with 1 toys\n", "")
    # A working command still refuses arguments it does not know.
    rc, _, err = _call(["bench", "toy", "--nope"])
    assert rc == 2 and "unrecognized arguments: --nope" in err


def test_a_broken_command_is_listed_and_reported_without_crashing(toy_plugin):
    rc, out, err = _call(["bench", "--help"])
    assert rc == 0 and err == ""
    assert "failed to load: ImportError: needs the frobnicator" in " ".join(out.split())
    # Running it, with or without arguments it cannot know: one line, exit 2.
    for argv in (["bench", "broken"], ["bench", "broken", "--whatever", "3"]):
        rc, out, err = _call(argv)
        assert (rc, out, err.strip()) == (2, "", BROKEN_MESSAGE)
    # add_arguments raising, or setting no func: the same, with the reason.
    rc, _, err = _call(["reproduce", "raising"])
    assert rc == 2 and err.strip() == (
        "idt-desk reproduce: error: command 'reproduce.raising' (idt_raising_cmd) failed to "
        "load: RuntimeError: option table missing")
    rc, _, err = _call(["nofunc", "--x", "1"])
    assert rc == 2 and "idt_nofunc_cmd.add_arguments(parser) sets no func" in err
    # Every other command still parses and runs.
    assert _call(["bench", "toy"])[0] == 0
    rc, out, _ = _call(["bench", "engine", "--help"])
    assert rc == 0 and "--repeats" in out
    rc, out, err = _call(["sources"])
    assert rc == 0 and "pendulum:" in out and err == ""
    assert ("    bench.broken: FAILED TO LOAD (idt_broken_cmd): ImportError: needs the "
            "frobnicator") in out.splitlines()
    assert "    bench.toy: idt_toy_cmd" in out.splitlines()
    assert "reproduce.raising: FAILED TO LOAD (idt_raising_cmd): RuntimeError" in out


def test_names_that_clash_with_the_core_are_skipped_and_never_imported(toy_plugin):
    rc, out, _ = _call(["gui", "--help"])
    assert rc == 0 and "--screenshot" in out and "--impostor-option" not in out
    rc, out, _ = _call(["bench", "engine", "--help"])
    assert rc == 0 and "--repeats" in out and "--impostor-option" not in out
    rc, out, _ = _call(["reproduce", "--help"])  # the core parent, with its contributed child
    assert rc == 0 and "usage: idt-desk reproduce" in out and "raising" in out
    assert "--impostor-option" not in out
    rc, _, err = _call(["foo", "bar"])
    assert rc == 2 and "invalid choice: 'foo'" in err
    assert "idt_clash_cmd" not in sys.modules
    rc, out, _ = _call(["sources"])
    lines = {line.split(":")[0].strip(): line for line in out.splitlines()
             if "SKIPPED" in line}
    assert set(lines) == {"gui", "bench.engine", "reproduce", "foo.bar", "bench.a.b"}
    assert "clashes with the command 'idt-desk gui'" in lines["gui"]
    assert "clashes with the command 'idt-desk bench engine'" in lines["bench.engine"]
    assert "no core command 'foo'" in lines["foo.bar"]
    assert "not a valid command name" in lines["bench.a.b"]


def test_the_built_in_commands_come_from_the_entry_points():
    entries = plugins.discover_commands(refresh=True)
    assert {name: e.value for name, e in entries.items()} == {
        "bench.dialogue": "idt_desk_sources.dialogue.bench",
        "bench.llama": "idt_desk_sources.dialogue.bench_llama",
        "bench.pendulum": "idt_desk_sources.pendulum.bench",
        "bench.reproduce": "idt_desk_sources.gym.bench_reproduce",
        "bench.rl": "idt_desk_sources.gym.bench",
        "bench.isolation": "idt_desk_sources.gym.bench_isolation",
        "reproduce.cheetah": "idt_desk_sources.gym.reproduce",
        "reproduce.cheetah-estimator": "idt_desk_sources.gym.estimator_study",
        "reproduce.wrapper-views": "idt_desk_sources.gym.view_study",
        "reproduce.isolation": "idt_desk_sources.gym.isolation_study",
        "reproduce.profile": "idt_desk_sources.gym.profile_study",
        "reproduce.cheetah-live": "idt_desk_sources.gym.live_study",
        "reproduce.dialogue": "idt_desk_sources.dialogue.reproduce",
        "reproduce.pendulum": "idt_desk_sources.pendulum.reproduce",
        "reproduce.pendulum-alarms": "idt_desk_sources.pendulum.alarms",
        "train": "idt_desk_sources.gym.train",
        "gui": "idt_desk_widgets.commands:GUI",
        "watch": "idt_desk_widgets.commands:WATCH",
        "pictures": "idt_desk_widgets.commands:PICTURES",
        "bench.gui": "idt_desk_widgets.commands:BENCH_GUI",
        "bench.follow": "idt_desk_widgets.commands:BENCH_FOLLOW",
        "bench.fleet": "idt_desk_widgets.commands:BENCH_FLEET",
        "bench.storm": "idt_desk_widgets.commands:BENCH_STORM",
    }
    for argv, option in ((["reproduce", "pendulum"], "--batch"), (["train"], "--algo"),
                         (["bench", "rl"], "--rounds"), (["bench", "pendulum"], "--seconds"),
                         (["reproduce", "cheetah"], "--perturbations"),
                         (["bench", "reproduce"], "--trials"),
                         (["bench", "isolation"], "--kinds"),
                         (["reproduce", "dialogue"], "--report-only"),
                         (["reproduce", "pendulum-alarms"], "--false-alarms"),
                         (["bench", "dialogue"], "--judge")):
        rc, out, err = _call([*argv, "--help"])
        assert rc == 0, err
        assert f"usage: idt-desk {' '.join(argv)}" in out and option in out
    rc, out, _ = _call(["bench", "--help"])
    assert "pendulum integrator vs scipy solve_ivp" in out
    rc, out, _ = _call(["--help"])
    assert "train a Stable-Baselines3 policy to ship (checkpoints, --resume)" in out


def test_building_the_parser_leaves_the_commands_heavy_imports_lazy():
    code = ("import sys; from idt_desk.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'stable_baselines3', 'gymnasium', 'mujoco', "
            "'dask') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_core_command_still_refuses_unknown_arguments():
    rc, _, err = _call(["sources", "--nope"])
    assert rc == 2 and err.strip().splitlines()[-1] == (
        "idt-desk: error: unrecognized arguments: --nope")


@pytest.mark.parametrize("argv", [["--help"], ["runs", "{tmp}"], ["runs", "{tmp}", "--json"]])
def test_help_and_a_listing_start_light(tmp_path, argv):
    """``idt-desk --help`` and ``idt-desk runs`` import no numba, pandas or scipy (each cost
    about 0.5 s of CPU at start; the command's own CPU time is in ``assets/docs/watch.md``),
    and no plugin command they cannot reach."""
    from tests.run_trees import alarmed_run

    alarmed_run(tmp_path / "one")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = ("import sys, contextlib, io\nfrom idt_desk.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        rc = main(sys.argv[1:])\n"
            "    except SystemExit as e:\n        rc = e.code\n"
            "heavy = ('numba', 'pandas', 'scipy', 'pyarrow', 'torch', 'gymnasium', 'PySide6',"
            " 'idt_desk_sources.gym.reproduce', 'idt_desk_sources.pendulum.reproduce')\n"
            "print(rc, sorted(m for m in heavy if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0 []", r.stdout
