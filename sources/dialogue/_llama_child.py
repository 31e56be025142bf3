"""The built-in model's own process: llama.cpp behind a pipe of JSON lines.

:class:`~idt_desk_sources.dialogue._backends.BuiltinBackend` starts this file as a script
(``python _llama_child.py``), so a fault in native code — an instruction the CPU refuses
(SIGILL), a segmentation fault, the kernel's out-of-memory killer — ends this process, never
the dashboard, its recording or a test worker. It imports nothing of IDT Desk: what crosses
the pipe is plain data.

One request a line on stdin, answered on stdout (everything native code prints goes to
stderr, so the protocol's lines stay clean):

``{"op": "load", "model": M}``
    load (or find) the model ``M`` = ``{"path", "n_ctx", "threads", "role"}``; answers
    ``{"loaded": true, "system_info": "...", "version": "..."}``.
``{"op": "chat", "seq": n, "model": M, "messages": [...], "options": {...}, "drop": d}``
    stream a reply: ``{"piece": "..."}`` per piece, ``{"alive": true}`` at most once a
    second while llama.cpp computes (reading a long prompt sends no piece for minutes), then
    ``{"done": text, "dropped": d}``, ``{"stopped": true, "partial": text}`` or
    ``{"error": message, "fatal": bool, "partial": text}``.
``{"op": "stop", "seq": n}``
    stop chat ``n`` (read while it runs; a stop for a chat already answered is ignored).
``{"op": "bench", "model": M, "text": "...", "generate": g}``
    time this build: the text read as a prompt from an empty cache, then ``g`` tokens
    generated greedily; answers ``{"prompt_tokens", "prompt_seconds", "generated",
    "generate_seconds", "system_info"}``.

End of stdin ends the process (the parent is gone or closed it). SIGINT is ignored: a Ctrl-C
in the terminal is the parent's to handle.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time
from typing import Any

#: Seconds between two ``alive`` lines while llama.cpp computes.
HEARTBEAT = 1.0


class Stopped(Exception):
    """The parent asked this chat to stop."""


class ChatError(Exception):
    """A chat failed; ``fatal`` when a retry cannot help (a prompt the model cannot hold)."""

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class Model:
    """One llama.cpp model with its own KV cache.

    One per role: a turn re-reads only what is new in its prompt (one model alternating
    between student and teacher prompts re-read the whole context every call: 30 s a turn by
    turn 12).
    """

    def __init__(self, path: str, n_ctx: int, threads: int) -> None:
        import llama_cpp

        self.n_ctx = int(n_ctx)
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=self.n_ctx, n_threads=int(threads),
                                   n_threads_batch=int(threads), verbose=False)

    def chat(self, msgs: list[dict], options: dict[str, Any], drop: int, send, should_stop,
             heartbeat) -> tuple[str, int]:
        """A reply and the exchanges left out (the oldest, when prompt and reply do not fit).

        What goes is decided in steps of half the remaining exchanges, starting from the
        parent's ``drop`` (the last reply's), so the prompt's beginning stays the same from
        turn to turn and llama.cpp re-reads only its new end (dropping one exchange a turn
        shifted the whole prompt every turn: 2-4 minutes a turn at 4,000 tokens on one
        shared core).
        """
        first = 1 if msgs and msgs[0]["role"] == "system" else 0
        n_exchanges = max(0, (len(msgs) - first - 1) // 2)
        drop = min(int(drop), n_exchanges)
        budget = self.n_ctx - int(options["num_predict"]) - 64
        while True:
            trial = msgs[:first] + msgs[first + 2 * drop:]
            if self._n_tokens(trial) <= budget:
                try:
                    return self._stream(trial, options, send, should_stop, heartbeat), drop
                except ValueError as exc:  # "Requested tokens (N) exceed context window"
                    if "context window" not in str(exc):
                        raise ChatError(f"the built-in model cannot take this prompt: {exc}",
                                        fatal=True) from None
            if drop >= n_exchanges:
                raise ChatError(f"the built-in model's {self.n_ctx}-token context cannot hold "
                                "even this turn's prompt", fatal=True)
            drop += max(1, (n_exchanges - drop + 1) // 2)

    def bench(self, text: str, generate: int) -> dict[str, Any]:
        """Seconds to read ``text`` from an empty cache, then to generate ``generate`` tokens."""
        tokens = self.llm.tokenize(text.encode(), add_bos=True)
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()
        t0 = time.perf_counter()
        self.llm.eval(tokens)
        t1 = time.perf_counter()
        made = 0
        for _token in self.llm.generate([], top_k=1, temp=0.0, reset=False):
            made += 1
            if made >= generate:
                break
        t2 = time.perf_counter()
        return {"prompt_tokens": len(tokens), "prompt_seconds": t1 - t0, "generated": made,
                "generate_seconds": t2 - t1}

    def _n_tokens(self, msgs: list[dict]) -> int:
        """Tokens of the messages, with a few per message for the chat template."""
        return sum(len(self.llm.tokenize(m["content"].encode(), add_bos=False)) + 6
                   for m in msgs) + 8

    def _stream(self, msgs: list[dict], options: dict[str, Any], send, should_stop,
                heartbeat) -> str:
        """Stream a reply; a stop interrupts even the prompt's evaluation.

        llama.cpp reads the whole prompt before the first piece, with no piece to check the
        stop flag between: its abort callback asks the flag while it computes (and sends the
        heartbeat), and an aborted read raises Stopped (the tokens read before it stay valid:
        llama-cpp-python counts a batch once decoded).
        """
        import llama_cpp

        def ask(_data: Any) -> bool:
            heartbeat()
            return bool(should_stop())

        pieces: list[str] = []
        abort = llama_cpp.ggml_abort_callback(ask)
        ctx = self.llm._ctx.ctx  # the llama_context handle (llama-cpp-python 0.3)
        llama_cpp.llama_set_abort_callback(ctx, abort, None)
        try:
            stream = self.llm.create_chat_completion(
                messages=msgs, stream=True, temperature=float(options["temperature"]),
                top_k=int(options["top_k"]), top_p=float(options["top_p"]),
                max_tokens=int(options["num_predict"]),
                repeat_penalty=float(options["repeat_penalty"]), seed=int(options["seed"]))
            for chunk in stream:
                delta = chunk["choices"][0].get("delta", {}).get("content")
                if delta:
                    pieces.append(delta)
                    send(piece=delta)
                if should_stop():
                    raise Stopped("".join(pieces))
        except RuntimeError:  # "llama_decode returned 2": aborted
            if should_stop():
                raise Stopped("".join(pieces)) from None
            raise
        finally:
            llama_cpp.llama_set_abort_callback(ctx, llama_cpp.ggml_abort_callback(), None)
        return "".join(pieces)


def main() -> int:
    """Serve requests until stdin ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # native code's prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    lock = threading.Lock()
    last = [0.0]

    def send(**msg: Any) -> None:
        with lock:
            proto.write(json.dumps(msg) + "\n")
            proto.flush()
            last[0] = time.monotonic()

    def heartbeat() -> None:
        if time.monotonic() - last[0] >= HEARTBEAT:
            send(alive=True)

    requests: queue.Queue = queue.Queue()
    stops: set[int] = set()
    ended = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            msg = json.loads(line)
            if msg.get("op") == "stop":
                stops.add(int(msg["seq"]))
            else:
                requests.put(msg)
        ended.set()
        requests.put({"op": "quit"})

    threading.Thread(target=read, name="requests", daemon=True).start()
    models: dict[tuple, Model] = {}

    def model(spec: dict[str, Any]) -> Model:
        key = (spec["path"], int(spec["n_ctx"]), int(spec["threads"]), spec.get("role", ""))
        if key not in models:
            models[key] = Model(spec["path"], spec["n_ctx"], spec["threads"])
        return models[key]

    while True:
        msg = requests.get()
        op = msg.get("op")
        if op == "quit":
            break
        if op == "load":
            import llama_cpp

            model(msg["model"])
            send(loaded=True, version=llama_cpp.__version__,
                 system_info=llama_cpp.llama_print_system_info().decode(errors="replace"))
        elif op == "bench":
            import llama_cpp

            send(**model(msg["model"]).bench(msg["text"], int(msg["generate"])),
                 system_info=llama_cpp.llama_print_system_info().decode(errors="replace"))
        elif op == "chat":
            seq = int(msg["seq"])

            def should_stop(seq: int = seq) -> bool:
                return seq in stops or ended.is_set()

            try:
                text, dropped = model(msg["model"]).chat(
                    msg["messages"], msg["options"], msg.get("drop", 0), send, should_stop,
                    heartbeat)
                send(done=text, dropped=dropped)
            except Stopped as exc:
                send(stopped=True, partial=str(exc))
            except ChatError as exc:
                send(error=str(exc), fatal=exc.fatal, partial="")
            except Exception as exc:
                send(error=f"{type(exc).__name__}: {exc}", fatal=False, partial="")
            stops.discard(seq)
        else:
            send(error=f"unknown request {op!r}", fatal=True, partial="")
    for m in models.values():
        m.llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
