"""The sliding-window metric engine: P, H_f, H_b, dH and friends over (S, A, S') streams.

One file: the numba kernels and the engine driving them share one table layout (keys, home
slots, counts, fixed-point sums), which no part of it can change alone.

How it works
------------
Six count tables are kept for the samples currently inside the window: S, A, S', (S, A),
(S, S') and (S, A, S'). Each is an open-addressing (linear probing) hash table keyed on the
int64 symbol or the tuple of symbols, with backward-shift deletion so a table never holds more
than the window's distinct keys: memory is flat however long a session runs.

For each table the engine keeps T = sum_k c_k log2 c_k as a fixed-point integer (units of
2**-shift bits, with ``shift`` chosen from W so that W log2 W never overflows int64). Adding a
sample to a count c adds table[c + 1] - table[c]; removing it subtracts the same: O(1) per
sample, and integer arithmetic makes the running sums exact, so the streaming and batch forms
(and any split of a stream into batches) give bit-identical windows. Plug-in entropy of a
window of N = W samples is then H = log2 W - T / (W 2**shift).

Differences of entropies that share a window (H_f, H_b, H(A|S), MI(A;S'|S)) are taken on the
integers first, so a deterministic window gives H_f = 0 exactly rather than rounding noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numba
import numpy as np

from idt_desk.metrics._hashing import hash1, hash2, hash3, splitmix_next

__all__ = [
    "WINDOW_KEYS",
    "MetricEngine",
    "sliding_metrics",
    "surrogate_null",
    "window_means",
]

# Table indices, and the constants passed to kernels, are np.int64 rather than Python ints:
# numba types a Python int constant argument as a literal and compiles the callee once per
# value (12 table-function variants and a 20 s cold compile, measured), not once.
_S, _A, _N, _SA, _SN, _SAN = (np.int64(i) for i in range(6))
_ZERO, _ADD, _REMOVE = np.int64(0), np.int64(1), np.int64(-1)
_N_TABLES = 6

# The hot kernels allocate nothing, so they run without numba's reference counting: with it,
# the incref/decref pairs the inlined table operations leave behind cost ~10x in throughput
# (measured: 1.1e6 vs 1.1e7 transitions/s at W=300, stride 1). They release the GIL so a
# session's worker thread does not starve the GUI thread (13 -> 57 frames/s measured).
_KERNEL = {"cache": True, "_nrt": False, "nogil": True}

#: Keys of the per-window result dict, in a stable order.
WINDOW_KEYS = (
    "start",
    "P",
    "H_f",
    "H_b",
    "dH",
    "MI",
    "H_S",
    "H_A",
    "H_S_next",
    "H_SA",
    "H_SS_next",
    "H_SAS",
    "H_A_given_S",
    "MI_A_S_next_given_S",
    "K_S",
    "K_A",
    "K_S_next",
    "K_SAS",
    "unique_frac",
)

_CORRECTIONS = (None, "miller-madow")


def _fixed_point_shift(window: int) -> int:
    """Bits of fraction so that sum c log2 c <= W log2 W fits in int64 with headroom."""
    top = window * math.log2(max(window, 2)) + 1.0
    return max(0, min(52, 61 - math.ceil(math.log2(top))))


def _clogc_table(window: int, shift: int) -> np.ndarray:
    c = np.arange(window + 2, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(c > 0, c * np.log2(np.maximum(c, 1.0)), 0.0)
    return np.rint(v * 2.0**shift).astype(np.int64)


def _capacity(window: int) -> int:
    cap = 16
    while cap < 2 * window:
        cap *= 2
    return cap


# ---------------------------------------------------------------------------------------------
# numba kernels
# ---------------------------------------------------------------------------------------------


@numba.njit(**_KERNEL)
def _table_add(t, h, k0, k1, k2, keys, home, counts, clogc, sums, distinct, mask):
    i = h & mask
    while True:
        c = counts[t, i]
        if c == 0:
            keys[t, i, 0] = k0
            keys[t, i, 1] = k1
            keys[t, i, 2] = k2
            home[t, i] = h & mask
            counts[t, i] = 1
            sums[t] += clogc[1]
            distinct[t] += 1
            return
        if keys[t, i, 0] == k0 and keys[t, i, 1] == k1 and keys[t, i, 2] == k2:
            counts[t, i] = c + 1
            sums[t] += clogc[c + 1] - clogc[c]
            return
        i = (i + 1) & mask


@numba.njit(**_KERNEL)
def _table_remove(t, h, k0, k1, k2, keys, home, counts, clogc, sums, distinct, mask):
    i = h & mask
    while True:
        c = counts[t, i]
        if c == 0:
            # Removing a key that is not there means the window bookkeeping is broken.
            raise RuntimeError("metric engine: removed a symbol that is not in the window")
        if keys[t, i, 0] == k0 and keys[t, i, 1] == k1 and keys[t, i, 2] == k2:
            break
        i = (i + 1) & mask
    sums[t] += clogc[c - 1] - clogc[c]
    if c > 1:
        counts[t, i] = c - 1
        return
    distinct[t] -= 1
    # Backward-shift deletion keeps every probe chain unbroken without tombstones.
    j = i
    while True:
        j = (j + 1) & mask
        if counts[t, j] == 0:
            break
        k = home[t, j]
        if i <= j:
            stays = i < k <= j
        else:
            stays = k > i or k <= j
        if stays:
            continue
        keys[t, i, 0] = keys[t, j, 0]
        keys[t, i, 1] = keys[t, j, 1]
        keys[t, i, 2] = keys[t, j, 2]
        home[t, i] = k
        counts[t, i] = counts[t, j]
        i = j
    counts[t, i] = 0


@numba.njit(**_KERNEL)
def _update(sign, s, a, n, has_a, keys, home, counts, clogc, sums, distinct, mask):
    """Add (sign > 0) or remove one transition (s, a, n) in every table."""
    z = _ZERO
    tab = (keys, home, counts, clogc, sums, distinct, mask)
    if sign > 0:
        _table_add(_S, hash1(s), s, z, z, *tab)
        _table_add(_N, hash1(n), n, z, z, *tab)
        _table_add(_SN, hash2(s, n), s, n, z, *tab)
        if has_a:
            _table_add(_A, hash1(a), a, z, z, *tab)
            _table_add(_SA, hash2(s, a), s, a, z, *tab)
            _table_add(_SAN, hash3(s, a, n), s, a, n, *tab)
    else:
        _table_remove(_S, hash1(s), s, z, z, *tab)
        _table_remove(_N, hash1(n), n, z, z, *tab)
        _table_remove(_SN, hash2(s, n), s, n, z, *tab)
        if has_a:
            _table_remove(_A, hash1(a), a, z, z, *tab)
            _table_remove(_SA, hash2(s, a), s, a, z, *tab)
            _table_remove(_SAN, hash3(s, a, n), s, a, n, *tab)


_FLOAT_KEYS = (
    "P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next", "H_SA", "H_SS_next", "H_SAS",
    "H_A_given_S", "MI_A_S_next_given_S", "unique_frac",
)
_INT_KEYS = ("start", "K_S", "K_A", "K_S_next", "K_SAS")


@numba.njit(**_KERNEL)
def _entropy(t, k, unit, log_w, mm):
    """Plug-in entropy from T = sum c log2 c (fixed point) and K distinct; mm adds (K-1)*mm."""
    if k <= 1:
        return 0.0  # exactly, not W log2 W rounded to fixed point
    return log_w - t / unit + (k - 1) * mm


@numba.njit(**_KERNEL)
def _emit(w, start, sums, distinct, has_a, window, unit, log_w, mm, out_f, out_i):
    """Write window ``w``'s metrics.

    Plug-in differences of entropies of the same window are taken on the integers, so a
    deterministic window has H_f = 0 exactly.
    """
    t_s, t_n, t_sn = sums[_S], sums[_N], sums[_SN]
    k_s, k_n, k_sn = distinct[_S], distinct[_N], distinct[_SN]
    if has_a:
        t_a, t_sa, t_san = sums[_A], sums[_SA], sums[_SAN]
        k_a, k_sa, k_san = distinct[_A], distinct[_SA], distinct[_SAN]
    else:
        # Passive system: A is constant, so (S, A) ~ S and (S, A, S') ~ (S, S').
        t_a, t_sa, t_san = 0, t_s, t_sn
        k_a, k_sa, k_san = 1, k_s, k_sn
    e_s = _entropy(t_s, k_s, unit, log_w, mm)
    e_a = _entropy(t_a, k_a, unit, log_w, mm)
    e_n = _entropy(t_n, k_n, unit, log_w, mm)
    e_sa = _entropy(t_sa, k_sa, unit, log_w, mm)
    e_sn = _entropy(t_sn, k_sn, unit, log_w, mm)
    e_san = _entropy(t_san, k_san, unit, log_w, mm)
    if mm > 0.0:
        h_f = e_san - e_sa
        h_b = e_san - e_n
        h_a_s = e_sa - e_s
        cmi = e_sa + e_sn - e_s - e_san
        mi = e_sa + e_n - e_san
    else:
        h_f = (t_sa - t_san) / unit
        h_b = (t_n - t_san) / unit
        h_a_s = (t_s - t_sa) / unit
        # Both are >= 0 exactly; clamp the last-bit rounding.
        cmi = max((t_s + t_san - t_sa - t_sn) / unit, 0.0)
        mi = max(e_n - h_f, 0.0)
    denom = e_s + e_a + e_n
    out_f[0, w] = mi / denom if denom > 0.0 else np.nan
    out_f[1, w] = h_f
    out_f[2, w] = h_b
    out_f[3, w] = h_f - h_b
    out_f[4, w] = mi
    out_f[5, w] = e_s
    out_f[6, w] = e_a
    out_f[7, w] = e_n
    out_f[8, w] = e_sa
    out_f[9, w] = e_sn
    out_f[10, w] = e_san
    out_f[11, w] = h_a_s
    out_f[12, w] = cmi
    out_f[13, w] = k_san / window
    out_i[0, w] = start
    out_i[1, w] = k_s
    out_i[2, w] = k_a
    out_i[3, w] = k_n
    out_i[4, w] = k_san


@numba.njit(**_KERNEL)
def _push(
    s_in, a_in, n_in, has_a, window, stride, mm,
    keys, home, counts, clogc, sums, distinct, mask, ring, pos, unit,
    out_f, out_i,
):
    """Feed samples and write the metrics of every window they finish.

    ``pos`` holds [samples seen, start of the next window, oldest sample in the tables].
    Returns the number of windows written to ``out_f`` / ``out_i``.
    """
    log_w = math.log2(window)
    n_seen = pos[0]
    next_start = pos[1]
    lo = pos[2]
    n_out = _ZERO
    for j in range(s_in.shape[0]):
        i = n_seen + j
        # The tables hold samples [lo, i); drop those before the next window's start.
        while lo < next_start and lo < i:
            r = lo % window
            _update(
                _REMOVE, ring[r, 0], ring[r, 1], ring[r, 2], has_a,
                keys, home, counts, clogc, sums, distinct, mask,
            )
            lo += 1
        if i < next_start:
            # Only when stride > window: this sample falls between two windows.
            lo = i + 1
            continue
        r = i % window
        ring[r, 0] = s_in[j]
        ring[r, 1] = a_in[j]
        ring[r, 2] = n_in[j]
        _update(
            _ADD, s_in[j], a_in[j], n_in[j], has_a,
            keys, home, counts, clogc, sums, distinct, mask,
        )
        if i + 1 - next_start == window:
            _emit(
                n_out, next_start, sums, distinct, has_a, window, unit, log_w, mm, out_f, out_i
            )
            n_out += 1
            next_start += stride
    pos[0] = n_seen + s_in.shape[0]
    pos[1] = next_start
    pos[2] = lo
    return n_out


def _as_symbols(x: object, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integer symbols, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(
            f"{name} must hold integer symbols (got dtype {arr.dtype}); "
            "symbolise continuous data first (idt_desk.Symbolizer)"
        )
    return np.ascontiguousarray(arr, dtype=np.int64)


def _check_window(window: int, stride: int) -> None:
    if int(window) != window or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    if int(stride) != stride or stride < 1:
        raise ValueError(f"stride must be a positive integer, got {stride!r}")


def _check_correction(correction: str | None) -> None:
    if correction not in _CORRECTIONS:
        raise ValueError(f"correction must be one of {_CORRECTIONS}, got {correction!r}")


class MetricEngine:
    """Streaming sliding-window metric engine.

    Push batches of transitions of any size; each call returns the windows that finished in
    that batch. Windows hold ``window`` consecutive transitions and start every ``stride``
    transitions (window k starts at transition k * stride). The results are bit-identical to
    :func:`sliding_metrics` on the concatenated stream, however it is split.

    Parameters
    ----------
    window, stride
        Window length and step, in transitions.
    has_action
        False for a passive system (no A): H(A) = 0 and A drops out of every joint.
    correction
        None for plug-in (maximum-likelihood) entropies, or ``"miller-madow"`` to add
        (K - 1) / (2 N ln 2) to every entropy, K being the distinct symbols in the window.

    Examples
    --------
    An outcome the state and the action fix leaves no forward uncertainty:

    >>> import numpy as np
    >>> from idt_desk.metrics.engine import MetricEngine
    >>> rng = np.random.default_rng(0)
    >>> s, a = rng.integers(0, 4, 1000), rng.integers(0, 2, 1000)
    >>> engine = MetricEngine(window=300, stride=100, has_action=True)
    >>> w = engine.push(s, (s + a) % 4, a)  # S' = S + A mod 4
    >>> len(w["start"]), w["start"][:3].tolist()
    (8, [0, 100, 200])
    >>> float(w["H_f"][0]), round(float(w["P"][0]), 2)
    (0.0, 0.4)
    >>> bool(np.allclose(w["dH"], w["H_f"] - w["H_b"]))  # ΔH = H_f − H_b
    True

    """

    def __init__(
        self,
        window: int = 300,
        stride: int = 75,
        *,
        has_action: bool = True,
        correction: str | None = None,
    ) -> None:
        _check_window(window, stride)
        _check_correction(correction)
        self.window = int(window)
        self.stride = int(stride)
        self.has_action = bool(has_action)
        self.correction = correction
        self._shift = _fixed_point_shift(self.window)
        self._clogc = _clogc_table(self.window, self._shift)
        cap = _capacity(self.window)
        self._mask = cap - 1
        self._keys = np.zeros((_N_TABLES, cap, 3), dtype=np.int64)
        self._home = np.zeros((_N_TABLES, cap), dtype=np.int64)
        self._counts = np.zeros((_N_TABLES, cap), dtype=np.int64)
        self._sums = np.zeros(_N_TABLES, dtype=np.int64)
        self._distinct = np.zeros(_N_TABLES, dtype=np.int64)
        self._ring = np.zeros((self.window, 3), dtype=np.int64)
        self._pos = np.zeros(3, dtype=np.int64)

    @property
    def n_seen(self) -> int:
        """Transitions pushed so far."""
        return int(self._pos[0])

    @property
    def next_window_start(self) -> int:
        """Index of the first transition of the next window to finish."""
        return int(self._pos[1])

    def recent(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of the symbols (S, A, S') of the latest ``window`` transitions, oldest first.

        (With stride > window the samples between windows are never stored.)
        """
        k = min(self.window, self.n_seen)
        rows = self._ring[np.arange(self.n_seen - k, self.n_seen) % self.window]
        return rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy()

    def reset(self) -> None:
        """Forget every transition, as if newly constructed."""
        for arr in (self._keys, self._home, self._counts, self._sums, self._distinct, self._pos):
            arr[...] = 0

    def push(
        self,
        s: np.ndarray,
        s_next: np.ndarray,
        a: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Feed transitions; return the windows they finished (arrays may be empty).

        Parameters
        ----------
        s, s_next
            Integer symbols of S and S', one per transition.
        a
            Integer symbols of A; required when ``has_action`` and ignored (may be None)
            for a passive engine.

        """
        s = _as_symbols(s, "s")
        s_next = _as_symbols(s_next, "s_next")
        if s_next.shape != s.shape:
            raise ValueError(f"s and s_next differ in length: {s.shape[0]} vs {s_next.shape[0]}")
        if self.has_action:
            if a is None:
                raise ValueError("this engine has an action channel: pass a")
            a = _as_symbols(a, "a")
            if a.shape != s.shape:
                raise ValueError(f"s and a differ in length: {s.shape[0]} vs {a.shape[0]}")
        else:
            a = np.zeros_like(s)
        max_out = s.shape[0] // self.stride + 2
        out_f = np.empty((len(_FLOAT_KEYS), max_out), dtype=np.float64)
        out_i = np.empty((len(_INT_KEYS), max_out), dtype=np.int64)
        mm = 1.0 / (2.0 * self.window * math.log(2.0)) if self.correction else 0.0
        n = _push(
            s, a, s_next, self.has_action, self.window, self.stride, mm,
            self._keys, self._home, self._counts, self._clogc, self._sums, self._distinct,
            self._mask, self._ring, self._pos, float(self.window) * 2.0**self._shift,
            out_f, out_i,
        )
        result = dict(zip(_FLOAT_KEYS, out_f[:, :n], strict=True))
        result.update(zip(_INT_KEYS, out_i[:, :n], strict=True))
        return {key: result[key] for key in WINDOW_KEYS}


def sliding_metrics(
    s: np.ndarray,
    s_next: np.ndarray,
    a: np.ndarray | None = None,
    window: int = 300,
    stride: int = 75,
    correction: str | None = None,
) -> dict[str, np.ndarray]:
    """Bi-predictability and predictive uncertainties over sliding windows.

    Parameters
    ----------
    s, s_next
        Integer symbols of the state S and the next state S', one per transition.
    a
        Integer symbols of the action A, or None for a passive system (H(A) = 0).
    window, stride
        Window length and step in transitions; window k covers transitions
        [k * stride, k * stride + window).
    correction
        None (plug-in entropies) or ``"miller-madow"``.

    Returns
    -------
    dict of 1-D numpy arrays, one entry per window (all in bits):
    ``start`` first transition; ``P`` = MI / (H(S) + H(A) + H(S')), NaN where the
    denominator is 0 (constant signal); ``H_f`` = H(S'|S,A); ``H_b`` = H(S,A|S');
    ``dH`` = H_f - H_b; ``MI`` = MI(S,A;S'); ``H_S``, ``H_A``, ``H_S_next``, ``H_SA``,
    ``H_SS_next``, ``H_SAS`` entropies; ``H_A_given_S`` = H(A|S) (choice) and
    ``MI_A_S_next_given_S`` = MI(A;S'|S) (effect); ``K_S``, ``K_A``, ``K_S_next``, ``K_SAS``
    distinct symbols; ``unique_frac`` = K_SAS / window (1 means every transition in the
    window is unique: the plug-in estimate is saturated).

    """
    engine = MetricEngine(window, stride, has_action=a is not None, correction=correction)
    return engine.push(s, s_next, a)


# ---------------------------------------------------------------------------------------------
# Shuffle-surrogate null
# ---------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _null_kernel(s, a, n, starts, window, n_draws, seed, clogc, mask, out_sums):
    """For each window and draw: permute S' within the window, return T for (S, A, S')."""
    cap = mask + 1
    keys = np.zeros((1, cap, 3), dtype=np.int64)
    home = np.zeros((1, cap), dtype=np.int64)
    counts = np.zeros((1, cap), dtype=np.int64)
    sums = np.zeros(1, dtype=np.int64)
    distinct = np.zeros(1, dtype=np.int64)
    perm = np.empty(window, dtype=np.int64)
    for w in range(starts.shape[0]):
        st = starts[w]
        # One generator per window, so a window's null does not depend on what came before.
        state = seed * 1000003 + st
        for d in range(n_draws):
            for k in range(window):
                perm[k] = n[st + k]
            for k in range(window - 1, 0, -1):
                state, r = splitmix_next(state)
                m = r % (k + 1)
                tmp = perm[k]
                perm[k] = perm[m]
                perm[m] = tmp
            for k in range(window):
                _table_add(
                    _ZERO, hash3(s[st + k], a[st + k], perm[k]), s[st + k], a[st + k], perm[k],
                    keys, home, counts, clogc, sums, distinct, mask,
                )
            out_sums[w, d] = sums[0]
            for k in range(window):
                _table_remove(
                    _ZERO, hash3(s[st + k], a[st + k], perm[k]), s[st + k], a[st + k], perm[k],
                    keys, home, counts, clogc, sums, distinct, mask,
                )


def surrogate_null(
    s: np.ndarray,
    s_next: np.ndarray,
    a: np.ndarray | None = None,
    window: int = 300,
    stride: int = 75,
    n_draws: int = 20,
    seed: int = 0,
    windows: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Shuffle-surrogate null distribution of P per window.

    S' is permuted within each window (destroying the S, A -> S' coupling but keeping every
    marginal), ``n_draws`` times with a seeded generator; P of each surrogate is computed with
    the window's own marginal entropies (plug-in). A window whose measured P is not clearly
    above its null is estimator artefact, not coupling.

    Parameters
    ----------
    s, s_next, a, window, stride
        As for :func:`sliding_metrics`.
    n_draws
        Permutations per window.
    seed
        Seed; each window's draws depend only on (seed, window start).
    windows
        The result of :func:`sliding_metrics` for the same data, if already computed.

    Returns
    -------
    dict with ``start``, ``P_null_mean``, ``P_null_std`` (ddof=0) and ``P_null_z``, the
    measured P's distance from the null mean in null standard deviations.

    """
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws}")
    if windows is None:
        windows = sliding_metrics(s, s_next, a, window=window, stride=stride)
    s = _as_symbols(s, "s")
    s_next = _as_symbols(s_next, "s_next")
    a = np.zeros_like(s) if a is None else _as_symbols(a, "a")
    starts = np.ascontiguousarray(windows["start"], dtype=np.int64)
    shift = _fixed_point_shift(window)
    clogc = _clogc_table(window, shift)
    out = np.empty((starts.shape[0], n_draws), dtype=np.int64)
    _null_kernel(s, a, s_next, starts, window, n_draws, seed, clogc, _capacity(window) - 1, out)
    unit = float(window) * 2.0**shift
    h_sas = math.log2(window) - out / unit
    h_sa = np.asarray(windows["H_SA"])[:, None]
    h_n = np.asarray(windows["H_S_next"])[:, None]
    denom = np.asarray(windows["H_S"] + windows["H_A"] + windows["H_S_next"])[:, None]
    mi = np.maximum(h_sa + h_n - h_sas, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_null = np.where(denom > 0, mi / np.where(denom > 0, denom, 1.0), np.nan)
        mean = p_null.mean(axis=1)
        std = p_null.std(axis=1)
        z = (np.asarray(windows["P"]) - mean) / std
    return {"start": starts, "P_null_mean": mean, "P_null_std": std, "P_null_z": z}


def window_means(values: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
    """Mean of ``values`` over each window [start, start + window) (e.g. reward per window)."""
    v = np.asarray(values, dtype=np.float64)
    c = np.concatenate([[0.0], np.cumsum(v)])
    st = np.asarray(starts, dtype=np.int64)
    return (c[st + window] - c[st]) / window
