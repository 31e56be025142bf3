"""How often a detector's statistic up-crosses a threshold on the null, computed in milliseconds.

The null (``idt_desk.detection.detectors``, module doc) is a stationary Gaussian process of
unit variance whose autocorrelation is the baseline's initial positive sequence, realised as
the circulant embedding's (clipped) spectrum; a pessimistic baseline adds a mean δ and
scales it by γ. A threshold keeps a budget of one false alarm per ``arl`` windows when the
expected number of up-crossings of its statistic per window is 1/arl. That rate was once
read off null paths of up to 4 M samples with a bisection of full passes
(:mod:`idt_desk.detection.reference`); here each detector gets it the cheapest exact way:

- **EWMA** (and each MEWMA component): E is itself a stationary Gaussian process, so the
  rate of |E| crossing h upward is a bivariate-normal probability of two consecutive values,
  in closed form with Owen's T function (:func:`ewma_threshold`);
- **persistence**: a run of m windows beyond k starts at t exactly when |z_{t−m}| <= k and
  |z_{t−m+1}|, …, |z_t| > k, the probability of an (m + 1)-dimensional Gaussian event; it is
  estimated by importance sampling from a mixture centred on the event's most likely points
  (:func:`persistence_thresholds`);
- **the MEWMA's T²**: likewise a crossing is |M_{t−1}|² <= h < |M_t|² for the Gaussian pair
  of consecutive EWMA vectors (whitened components independent, as the reference simulated
  them), sampled with M_t spread out to the sphere of radius √h and M_{t−1} from its exact
  conditional law (:func:`joint_thresholds`);
- **CUSUM**: the statistic is a reflected random walk; above a few correlation times its
  up-crossing rate falls exactly exponentially, N(h) ≈ C e^{−θh} with θ = 2 d / τ per side
  (d its drift net of any mean, τ the null's long-run variance: the root of the Gaussian
  cumulant, Glynn & Whitt 1994), so C is read off a short simulated path at levels it
  crosses hundreds of times and the threshold solved for (:func:`cusum_thresholds`); where
  the drift is too small for that, or the budget so loose that a short path shows it, the
  crossings are counted directly.

Every threshold's up-crossings are counted from one sorted pass (:func:`crossing_threshold`):
a rise from s[t−1] to s[t] crosses every level in between. ``tests/test_nulls.py`` checks each
method against long simulated paths and the budget on simulated null hours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

__all__ = [
    "crossing_threshold",
    "cusum_thresholds",
    "ewma_threshold",
    "first_n_eff",
    "joint_thresholds",
    "null_spectrum",
    "persistence_thresholds",
    "pessimism",
    "simulate",
    "warm_kernels",
]

#: Importance samples per threshold search: thresholds to about 0.3 % (1σ over seeds; the
#: reference's 20 simulated crossings gave 2-3 %). T² is steeper in its rate: four times more.
IS_SAMPLES = 1 << 13
#: The CUSUM's short path: levels it crosses 30-400 times fix the exponential's constant.
CUSUM_PATH = 1 << 17


def pessimism(n_eff: float) -> tuple[float, float]:
    """(δ, γ): a mean two standard errors off, σ at its one-sided 97.7 % upper bound."""
    from scipy.special import chdtri  # the χ² quantile, without importing scipy.stats

    df = max(n_eff - 1.0, 1.0)
    return 2.0 / math.sqrt(n_eff), math.sqrt(df / chdtri(df, 1.0 - 0.0228))


def first_n_eff(good_enough: Callable[[float], bool], windows_per_eff: float) -> int:
    """Baseline windows at the first effective size on a fixed grid that is good enough.

    ``good_enough`` is taken as monotone (a longer baseline inflates less): a bisection of
    the grid finds its first good point.
    """
    # Steps of 5 %: the length said is at most 5 % more than the length that would do (on
    # the former grid's steps of up to 50 %, an RL baseline's 1,650 windows read 1,980).
    grid = tuple(sorted({round(10 * 1.05 ** k) for k in range(128)}))
    lo, hi = 0, len(grid)  # grid[hi] is good (hi = len: none known yet)
    while lo < hi:
        mid = (lo + hi) // 2
        if good_enough(float(grid[mid])):
            hi = mid
        else:
            lo = mid + 1
    return math.ceil(grid[min(lo, len(grid) - 1)] * windows_per_eff)


# -- the null -----------------------------------------------------------------------------


def _circulant_row(rho: np.ndarray, size: int) -> np.ndarray:
    row = np.zeros(size)
    row[: rho.size] = rho
    row[size - rho.size + 1:] = rho[:0:-1]
    return row


def null_spectrum(rho: np.ndarray, size: int) -> np.ndarray:
    """The null's spectrum on ``size`` frequencies (rfft grid), scaled to unit variance.

    The circulant embedding's spectrum of ``rho`` with its negative parts clipped, as
    :func:`simulate` colours its noise; the autocovariance it implies is ``irfft`` of it.
    """
    spectrum = np.clip(np.fft.rfft(_circulant_row(rho, size)).real, 0.0, None)
    return spectrum / np.fft.irfft(spectrum, size)[0]


def simulate(rho: np.ndarray, n: int, seed: int) -> np.ndarray:
    """A stationary Gaussian path (unit variance) with autocorrelation ``rho`` (then 0).

    Circulant embedding: the spectrum of the circulant whose first row is the (symmetric)
    autocorrelation, negative parts clipped, coloured white noise by FFT. Unlike a low-order
    AR fit it keeps the long-run variance Σρ that overlapping windows create and a CUSUM
    adds up.
    """
    size = 1 << math.ceil(math.log2(max(n, 2 * rho.size)))
    spectrum = np.clip(np.fft.rfft(_circulant_row(rho, size)).real, 0.0, None)
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(size // 2 + 1) + 1j * rng.standard_normal(size // 2 + 1)
    path = np.fft.irfft(noise * np.sqrt(spectrum * size / 2.0), size)
    return path[:n] / max(float(np.std(path)), 1e-12)


def _grid(rho: np.ndarray, memory: float) -> int:
    """A spectral grid long enough that a filter with this memory does not wrap around."""
    return 1 << math.ceil(math.log2(max(4096.0, 64.0 * memory, 4.0 * rho.size)))


# -- counting up-crossings ----------------------------------------------------------------


@njit(cache=True, nogil=True)
def _rises_above(s: np.ndarray, cutoff: float) -> tuple[np.ndarray, np.ndarray]:
    """(from, to) of every step at which ``s`` rises to above ``cutoff``.

    A step from ``s[t-1]`` up to ``s[t]`` is an up-crossing of every threshold h with
    ``s[t-1] <= h < s[t]``; the first sample rises from −inf (the alarm starts off).
    """
    n = s.shape[0]
    k = 0
    prev = -np.inf
    for t in range(n):
        if s[t] > cutoff and s[t] > prev:
            k += 1
        prev = s[t]
    lo = np.empty(k)
    hi = np.empty(k)
    k = 0
    prev = -np.inf
    for t in range(n):
        if s[t] > cutoff and s[t] > prev:
            lo[k] = prev
            hi[k] = s[t]
            k += 1
        prev = s[t]
    return lo, hi


def _level_sweep(starts: np.ndarray, start_w: np.ndarray, ends: np.ndarray,
                 end_w: np.ndarray, at_first: float, target: float) -> float | None:
    """The lowest level above which the weighted count of intervals holding it stays <= target.

    Intervals are [start, end); those open below the first breakpoint have an end and no
    start here, and ``at_first`` is their weight. None when the count never exceeds
    ``target`` above the lowest breakpoint.
    """
    values = np.concatenate([starts, ends])
    steps = np.concatenate([start_w, -end_w])
    order = np.argsort(values, kind="stable")
    values = values[order]
    level = at_first + np.cumsum(steps[order])  # the count just after each breakpoint
    last = np.append(values[1:] != values[:-1], True)  # a count holds after its last step
    values, level = values[last], level[last]
    over = np.flatnonzero(level > target)
    if over.size:
        return float(values[over[-1] + 1]) if over[-1] + 1 < values.size else None
    if at_first > target and values.size:
        return float(values[0])
    return None


def crossing_threshold(s: np.ndarray, count: float) -> float:
    """The lowest threshold above which ``s`` up-crosses at most ``count`` times, at any level.

    Every threshold's up-crossing count from one pass: a rise from ``s[t-1]`` to ``s[t]``
    crosses each h in [s[t-1], s[t]), so N(h) = #{rises with from <= h < to}. Only the rises
    that reach above a high cutoff are kept (the largest values of ``s``; the cutoff is
    lowered until N at it exceeds ``count``), sorted, and N is swept from the top down: the
    threshold is the breakpoint above the highest level where N exceeds ``count``. A
    statistic that never up-crosses more than ``count`` times gets its busiest level.
    """
    s = np.ascontiguousarray(s, dtype=np.float64)
    n = s.size
    keep = int(min(n, max(4096, 128 * math.ceil(count + 1))))
    while True:
        cutoff = -np.inf if keep >= n else float(np.partition(s, n - keep)[n - keep])
        lo, hi = _rises_above(s, cutoff)
        inside = lo <= cutoff  # rises already under way at the cutoff
        if inside.sum() > count or keep >= n:
            break
        keep = min(n, keep * 8)
    found = _level_sweep(lo[~inside], np.ones(int((~inside).sum())), hi, np.ones(hi.size),
                         float(inside.sum()), count)
    if found is not None:
        return found
    # Never more than ``count`` up-crossings at any level: its busiest one.
    values = np.sort(np.concatenate([lo[np.isfinite(lo)], hi]))
    busiest = np.array([np.sum((lo <= v) & (v < hi)) for v in values[:: max(1, values.size
                                                                          // 200)]])
    return float(values[:: max(1, values.size // 200)][int(np.argmax(busiest))])


# -- EWMA: closed form --------------------------------------------------------------------


def ewma_moments(rho: np.ndarray, lam: float) -> tuple[float, float]:
    """Variance and lag-1 correlation of the EWMA of the null (unit variance).

    The EWMA filters the null's spectrum with |H|² = λ² / (1 − 2(1 − λ) cos ω + (1 − λ)²);
    both moments are read off the filtered spectrum's autocovariance, on a grid long enough
    that the EWMA's memory does not wrap around.
    """
    size = _grid(rho, 1.0 / lam)
    spectrum = null_spectrum(rho, size)
    omega = 2.0 * np.pi * np.arange(spectrum.size) / size
    gain = lam * lam / (1.0 - 2.0 * (1.0 - lam) * np.cos(omega) + (1.0 - lam) ** 2)
    acov = np.fft.irfft(spectrum * gain, size)
    return float(acov[0]), float(min(acov[1] / acov[0], 1.0))


def ewma_crossing_rate(h: float, mean: float, sd: float, corr: float) -> float:
    """Expected up-crossings of ``|E| > h`` per window, E stationary Gaussian (closed form).

    With X, Y two consecutive values standardised (correlation c), an up-crossing of |E|
    above h is |X| below and |Y| above. Above h: P(X <= x < Y) = 2 T(x, a), Owen's T with
    a = √((1 − c)/(1 + c)) (Owen 1956); the same below −h; less the jumps from below −h to
    above h in one window (and back), integrated where they are not negligible.
    """
    from scipy import special

    if sd <= 0 or corr >= 1.0:
        return 0.0
    up, down = (h - mean) / sd, (h + mean) / sd
    a = math.sqrt((1.0 - corr) / (1.0 + corr))
    rate = 2.0 * (float(special.owens_t(up, a)) + float(special.owens_t(down, a)))
    root = math.sqrt(1.0 - corr * corr)
    if 0.5 * math.erfc((up + down) / (2.0 * math.sqrt(1.0 - corr))) > 1e-9 * rate:
        # ∫_y^∞ φ(v) Φ((−x − c v)/√(1 − c²)) dv: smooth, and negligible 12 σ past max(y, 0).
        nodes, weights = _LEGENDRE
        for x, y in ((down, up), (up, down)):
            top = max(y, 0.0) + 12.0
            v = y + (top - y) * 0.5 * (nodes + 1.0)
            f = np.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi) * 0.5 * special.erfc(
                (x + corr * v) / (root * math.sqrt(2.0)))
            rate -= float(f @ weights) * 0.5 * (top - y)
    return max(rate, 0.0)


#: Gauss–Legendre nodes and weights on [−1, 1] for the jump integrals.
_LEGENDRE = np.polynomial.legendre.leggauss(256)


def _root(f: Callable[[float], float], lo: float, hi: float, tol: float) -> float:
    """A root of ``f`` between ``lo`` (f > 0) and ``hi`` (f <= 0), by bisection to ``tol``."""
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


def ewma_threshold(var: float, corr: float, arl: float, delta: float = 0.0,
                   gamma: float = 1.0) -> float:
    """The |E| threshold up-crossed once per ``arl`` windows (E's mean δγ, σ γ√var)."""
    mean, sd = delta * gamma, gamma * math.sqrt(var)
    target = math.log(1.0 / arl)

    def excess(h: float) -> float:
        rate = ewma_crossing_rate(h, mean, sd, corr)
        return (math.log(rate) if rate > 0 else -1e300) - target

    # |E| up-crosses a level near its mean rarely (it is above it most of the time), then
    # more often, then ever more rarely: the threshold is on the falling side, above the
    # first level on a quarter-σ grid that is busier than the budget.
    busy: list[tuple[float, float]] = []
    for k in range(1, 33):
        busy.append((excess(mean + 0.25 * k * sd), mean + 0.25 * k * sd))
        if busy[-1][0] > 0:
            break
    else:  # never that busy: every threshold keeps the budget; the busiest level
        return max(busy)[1]
    lo = hi = busy[-1][1]
    while excess(hi) > 0:
        hi += 2.0 * sd
    return _root(excess, lo, hi, 1e-10 * max(hi, sd))


# -- persistence: importance sampling of an (m + 1)-dimensional Gaussian event -------------


@njit(cache=True, nogil=True)
def _weighted_count(a: np.ndarray, b: np.ndarray, w: np.ndarray, level: float) -> float:
    """Σ w [a <= level < b]: the weighted samples whose interval holds ``level``."""
    total = 0.0
    for i in range(a.shape[0]):
        if a[i] <= level < b[i]:
            total += w[i]
    return total


def _weighted_threshold(a: np.ndarray, b: np.ndarray, w: np.ndarray, target: float) -> float:
    """A level where Σ w [a <= level < b] / n falls to ``target``, on the falling side.

    The weighted count of intervals holding a level rises from the bottom and falls to 0
    above the highest ``b``. Only the intervals reaching highest matter: the top ones by
    ``b`` are kept, more until the count at the lowest end kept exceeds ``target``; then,
    scanning down from the top, the first level of a 32-step grid busier than ``target`` and
    the one above it bracket the level, which 40 halvings find.
    """
    goal = target * a.size
    keep, n = 512, a.size
    while True:
        cut = -np.inf if keep >= n else float(np.partition(b, n - keep)[n - keep])
        top = b > cut
        if keep >= n or _weighted_count(a[top], b[top], w[top], cut) > goal:
            break
        keep *= 4
    a, b, w = a[top], b[top], w[top]
    hi = float(np.max(b))
    floor = float(np.min(a)) if cut == -np.inf else cut
    lo = None
    for j in range(1, 33):
        level = hi - (hi - floor) * j / 32.0
        if _weighted_count(a, b, w, level) > goal:
            lo = level
            break
        top_level = level
    if lo is None:  # never that busy: every level keeps the budget
        return floor
    hi = top_level
    # Within [lo, hi) only the intervals with an end inside change the count.
    inner = ((a > lo) & (a <= hi)) | ((b > lo) & (b <= hi))
    base = float(w[~inner & (a <= lo) & (b > hi)].sum())
    a, b, w = a[inner], b[inner], w[inner]
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if base + _weighted_count(a, b, w, mid) > goal:
            lo = mid
        else:
            hi = mid
    return hi


def persistence_thresholds(rho: np.ndarray, m: int, arl: float,
                           targets: Sequence[tuple[float, float]], seed: int
                           ) -> list[float]:
    """K up-crossed once per ``arl`` windows by the least |z| of the last m, per (δ, γ).

    A run of m windows beyond k starts at t when |X_0| <= k and |X_1..m| > k for the m + 1
    consecutive values X (covariance the null's, mean δγ, σ γ). Importance sampling: the
    standard normals ξ (X = γ(δ + Lξ), L the covariance's Cholesky factor) are drawn from a
    mixture of N(0, I) and N(±η, I), η the event's most likely point (X_1..m at k, X_0 at
    its mean given them) at the first target's threshold, found by a first round.
    """
    size = _grid(rho, m + 1.0)
    acov = np.fft.irfft(null_spectrum(rho, size), size)[: m + 1]
    cov = acov[np.abs(np.subtract.outer(np.arange(m + 1), np.arange(m + 1)))]
    chol = np.linalg.cholesky(cov + 1e-12 * np.eye(m + 1))
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((IS_SAMPLES, m + 1))
    pick = rng.random(IS_SAMPLES)

    from scipy.special import ndtri

    k = float(-ndtri(0.5 / arl))  # a first guess: a single window beyond k, once per arl
    out: list[float] = []
    for todo in (targets[:1], targets):  # round 0 places the proposal, round 1 measures
        # The event's most likely point at k: X_1..m = k, X_0 = its mean given them (<= k).
        x1 = np.full(m, k)
        x0 = min(float(cov[0, 1:] @ np.linalg.solve(cov[1:, 1:], x1)), k)
        eta = np.linalg.solve(chol, np.concatenate([[x0], x1]))
        sign = np.where(pick < 0.1, 0.0, np.where(pick < 0.55, 1.0, -1.0))
        xi = base + sign[:, None] * eta
        proj, half = xi @ eta, 0.5 * float(eta @ eta)
        w = 1.0 / (0.1 + 0.45 * np.exp(proj - half) + 0.45 * np.exp(-proj - half))
        x = xi @ chol.T
        out = []
        for delta, gamma in todo:
            y = np.abs(gamma * (x + delta))
            out.append(_weighted_threshold(y[:, 0], y[:, 1:].min(axis=1), w, 1.0 / arl))
        k = out[0]
    return out


# -- the MEWMA's T²: importance sampling of consecutive EWMA vectors ---------------------


def joint_thresholds(var: np.ndarray, corr: np.ndarray, arl: float,
                     targets: Sequence[tuple[float, float]], seed: int,
                     near: float | None = None) -> list[float]:
    """T² = |M|² thresholds up-crossed once per ``arl`` windows, per (δ, γ).

    M's components are independent stationary Gaussian EWMAs (variance ``var``, lag-1
    correlation ``corr``; σ γ, the first one's mean δγ). A crossing is |M_{t−1}|² <= h <
    |M_t|²: M_t is drawn spread by s (its density ratio to the target's, (s^r) e^{−(s² − 1)
    |ξ|²/2}, weighs it), s² chosen so that |M_t|² is about h, and M_{t−1} from its exact law
    given M_t. The same normals serve every target (common random numbers). ``near``: the
    known baseline's threshold, when found already (a target's first guess scales it).
    """
    from scipy.special import chdtri

    var = np.asarray(var, dtype=np.float64)
    corr = np.asarray(corr, dtype=np.float64)
    r = var.size
    rng = np.random.default_rng(seed)
    xi1 = rng.standard_normal((4 * IS_SAMPLES, r))
    xi2 = rng.standard_normal((4 * IS_SAMPLES, r))
    sq1 = (xi1 * xi1).sum(axis=1)
    step = np.sqrt(np.clip(1.0 - corr * corr, 0.0, None))
    out = []
    for delta, gamma in targets:
        sd = gamma * np.sqrt(var)
        mean = np.zeros(r)
        mean[0] = delta * gamma
        if near is None:
            # T² is about σ² χ²_r: its level crossed once per arl (the crossings of a smooth
            # process are rarer than its exceedances, so this errs high), then refined once.
            h = float(chdtri(r, 1.0 / arl)) * float(np.mean(sd * sd)) + float(mean @ mean)
        else:
            h = gamma * gamma * near + float(mean @ mean)
        for _ in range(2 if near is None else 1):
            s = max(1.0, math.sqrt(h / float(np.sum(sd * sd))))
            w = s**r * np.exp(-0.5 * (s * s - 1.0) * sq1)
            now = mean + s * sd * xi1
            before = mean + corr * (now - mean) + sd * step * xi2
            h = _weighted_threshold((before * before).sum(axis=1), (now * now).sum(axis=1),
                                    w, 1.0 / arl)
        out.append(h)
    return out


# -- CUSUM: a short path and the exact exponential tail -----------------------------------


@njit(cache=True, nogil=True)
def _cusum_counts(z: np.ndarray, drift: float, shift: float, scale: float, spacing: float,
                  n_levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Up-crossings of each level ``spacing``·(1, …, ``n_levels``) by S+ and by S−.

    The CUSUM is of scale·(z + shift); S± start at 0, below every level.
    """
    up = np.zeros(n_levels + 1)
    down = np.zeros(n_levels + 1)
    per = 1.0 / spacing
    sp = 0.0
    sm = 0.0
    cp = 0  # ceil(S / spacing): the levels at or above S are number cp on
    cm = 0
    for t in range(z.shape[0]):
        x = scale * (z[t] + shift)
        sp = max(0.0, sp + x - drift)
        sm = max(0.0, sm - x - drift)
        k = min(math.ceil(sp * per), n_levels + 1)
        for j in range(cp, k):  # levels j·spacing in [old S, new S): crossed upward
            up[j] += 1.0
        cp = k
        k = min(math.ceil(sm * per), n_levels + 1)
        for j in range(cm, k):
            down[j] += 1.0
        cm = k
    return up[1:], down[1:]


@njit(cache=True, nogil=True)
def _cusum(z: np.ndarray, drift: float, shift: float, scale: float) -> np.ndarray:
    """max(S+, S−) of the two-sided CUSUM of scale·(z + shift), from rest."""
    out = np.empty(z.shape[0])
    sp = 0.0
    sm = 0.0
    for t in range(z.shape[0]):
        x = scale * (z[t] + shift)
        sp = max(0.0, sp + x - drift)
        sm = max(0.0, sm - x - drift)
        out[t] = max(sp, sm)
    return out


def cusum_thresholds(rho: np.ndarray, drift: float, arl: float,
                     targets: Sequence[tuple[float, float]], seed: int,
                     max_samples: int = 4_000_000, path: np.ndarray | None = None
                     ) -> list[float]:
    """The h that max(S+, S−) up-crosses once per ``arl`` windows, per (δ, γ) (module doc).

    Each side's up-crossings of h fall as C e^{−θh}, θ = 2 (d ∓ γδ) / (γ² τ); C is the mean
    of N(h) e^{θh} over the levels a 131,072-window path crosses at least 50 times and at
    most once in 300 windows (where the exponential already holds: checked in the tests),
    and h solves C₊ e^{−θ₊h} + C₋ e^{−θ₋h} = n / arl. A budget that such a path shows 20
    times, or a drift that a pessimistic mean nearly cancels, is counted directly instead.
    ``path``: the short path (``simulate(rho, CUSUM_PATH, seed)``) where the caller keeps it.
    """
    tau = float(null_spectrum(rho, _grid(rho, 1.0))[0])  # the long-run variance
    n = CUSUM_PATH
    path = simulate(rho, n, seed) if path is None else path
    long_path: np.ndarray | None = None
    out = []
    for delta, gamma in targets:
        theta = (2.0 * (drift - gamma * delta) / (gamma * gamma * tau),
                 2.0 * (drift + gamma * delta) / (gamma * gamma * tau))
        if 20.0 * arl <= n or theta[0] < 0.2 * 2.0 * drift / tau:
            length = int(min(max_samples, max(n, 20.0 * arl)))
            if length <= n:
                z = path[:length]
            else:
                long_path = simulate(rho, length, seed) if long_path is None else long_path
                z = long_path
            out.append(crossing_threshold(_cusum(z, drift, delta, gamma), length / arl))
            continue
        levels = np.arange(1, 101) * (0.25 / theta[0])  # N falls by e^−¼ from one to the next
        counts = _cusum_counts(path, drift, delta, gamma, 0.25 / theta[0], levels.size)
        consts = []
        for side in (0, 1):
            use = (counts[side] >= 50) & (counts[side] <= n / 300)
            if not use.any():
                use = counts[side] >= max(5.0, float(np.max(counts[side])) / 10)
            c = counts[side][use]
            consts.append(float(np.exp(np.sum(c * (np.log(c) + theta[side] * levels[use]))
                                       / np.sum(c))))
        def excess(h: float, c: list[float] = consts, th: tuple[float, float] = theta) -> float:
            return math.log(c[0] * math.exp(-th[0] * h) + c[1] * math.exp(-th[1] * h)) \
                - math.log(n / arl)

        hi = 1.0 / theta[0]
        while excess(hi) > 0:
            hi *= 2.0
        out.append(_root(excess, 0.0, hi, 1e-10 * hi) if excess(0.0) > 0 else 0.0)
    return out


def warm_kernels() -> None:
    """Load this module's compiled kernels (a threshold fit then never waits for numba)."""
    z = np.linspace(-1.0, 1.0, 8)
    _rises_above(z, 0.0)
    _weighted_count(z, z + 1.0, z, 0.0)
    _cusum_counts(z, 0.5, 0.0, 1.0, 0.5, 4)
    _cusum(z, 0.5, 0.0, 1.0)
