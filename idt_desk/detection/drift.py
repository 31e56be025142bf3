"""Generic online drift detectors: the online MMD and LSDD a practitioner would reach for.

The IDT's competitors (issue: "the IDT against the generic drift detectors"): the online
maximum mean discrepancy and least-squares density difference detectors of Cobb, Van
Looveren & Klaise, *Sequential multivariate change detection with calibrated and memoryless
false detection rates* (AISTATS 2022), as alibi-detect ships them (``MMDDriftOnline``,
``LSDDDriftOnline``, its PyTorch backend, release 0.13): the same statistics, the same
bootstrap that configures one threshold per time step to an expected run time (ERT), the
same median-heuristic Gaussian kernel, reference split and regularisation. Reimplemented in
NumPy because alibi-detect 0.13 requires ``numpy<2`` and ``numba<0.60`` (its package
metadata), which this project's numba kernels and JAX trainer cannot run with; every step
below names the alibi-detect method it follows.

Both detectors take instances one at a time (:meth:`OnlineDrift.update` takes a batch and
steps through it): each instance enters a sliding test window of ``window`` instances, the
statistic compares that window with the reference set, and the detector alarms when the
statistic exceeds the threshold of its time step. The thresholds are configured so that,
were the instances drawn independently from the reference distribution, the first alarm
would come after ``ert`` instances on average (a geometric run length: the probability of a
first alarm at each step is ``1 / ert``). A loop's transitions are not independent: the
false alarms this leaves are what the control runs measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

#: The detectors, by name: the statistic each computes.
KINDS = {"mmd": "online MMD² (Gaussian kernel), Cobb et al. 2022",
         "lsdd": "online LSDD (Gaussian kernel centres), Cobb et al. 2022"}
#: Their names, in the order tables show them.
DRIFT_KINDS = tuple(KINDS)
#: Bootstrap samples per unit of ERT (alibi-detect's advice: "at least an order of magnitude
#: larger than the ERT").
BOOTSTRAPS_PER_ERT = 10
#: Bootstrap samples the threshold configuration holds in memory at once (rows of it).
_CHUNK_FLOATS = 4_000_000


def _sq_dist(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, [len(x), len(y)] (``squared_pairwise_distance``)."""
    d = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * (x @ y.T)
    return np.maximum(d, 1e-30)


def median_sigma(x: np.ndarray) -> float:
    """The median heuristic's bandwidth on ``x`` against itself (alibi's ``sigma_median``).

    The median of the off-diagonal squared distances (the diagonal's n zeros skipped as
    alibi-detect skips them), σ = √(median / 2).
    """
    dist = _sq_dist(x, x)
    n = len(x)
    k = n + (dist.size - n) // 2 - 1
    return float(math.sqrt(0.5 * np.partition(dist.ravel(), k)[k]))


def gaussian(x: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
    """exp(−‖x − y‖² / 2σ²) (alibi-detect's ``GaussianRBF``)."""
    return np.exp(-_sq_dist(x, y) / (2.0 * sigma * sigma))


def quantile7(sample: np.ndarray, p: float) -> float:
    """The p-quantile, Hyndman & Fan's type 7 (alibi-detect's ``quantile``; NumPy's default).

    Raises
    ------
    ValueError
        Fewer samples than the quantile needs (alibi-detect refuses the same way).

    """
    n = len(sample)
    if not 1.0 / n <= p <= (n - 1.0) / n:
        raise ValueError(f"the {p}-quantile cannot be estimated from {n} bootstrap samples: "
                         "raise n_bootstraps (at least the ERT, ideally ten times it)")
    return float(np.quantile(sample, p))


@njit(cache=True, nogil=True)
def _mmd_bootstraps(kxx: np.ndarray, col: np.ndarray, full: float, ys: np.ndarray, w: int
                    ) -> np.ndarray:
    """MMD² of each bootstrap's w overlapping test windows against its sub-reference [B, w].

    ``ys`` [B, 2w − 1]: each bootstrap's extended test window; the sub-reference is every
    other instance. As alibi-detect's ``_configure_thresholds`` (the sub-reference's sum as
    the full sum less the test part, each test column's sum over the sub-reference as its
    full column sum less its test rows), with each window's block slid from the last rather
    than summed again.
    """
    n_boot, etw = ys.shape
    rw = len(col) - etw
    out = np.empty((n_boot, w))
    xy = np.empty(etw)
    for b in range(n_boot):
        y = ys[b]
        yy_off = 0.0
        xy_total = 0.0
        for j in range(etw):
            s = 0.0
            for i in range(etw):
                s += kxx[y[i], y[j]]
            xy[j] = col[y[j]] - s
            xy_total += xy[j]
            yy_off += s - kxx[y[j], y[j]]
        kxx_sum = (full - yy_off - 2.0 * xy_total) / (rw * (rw - 1.0))
        block = 0.0
        for i in range(w):
            for j in range(w):
                if i != j:
                    block += kxx[y[i], y[j]]
        cross = 0.0
        for j in range(w):
            cross += xy[j]
        for o in range(w):
            if o > 0:  # y[o − 1] leaves the window, y[o + w − 1] enters it
                leave, enter = y[o - 1], y[o + w - 1]
                for j in range(o, o + w - 1):
                    block += 2.0 * (kxx[enter, y[j]] - kxx[leave, y[j]])
                cross += xy[o + w - 1] - xy[o - 1]
            out[b, o] = kxx_sum + block / (w * (w - 1.0)) - 2.0 * cross / (rw * w)
    return out


@njit(cache=True, nogil=True)
def _lsdd_differences(kxc: np.ndarray, col: np.ndarray, ys: np.ndarray, w: int) -> np.ndarray:
    """The difference h = mean k(sub-reference, c) − mean k(test window, c), per window.

    Eqn 7 of Cobb et al. ([B, w, centres]); the sub-reference is every instance not in the
    extended test window ``ys[b]``, its mean the column sums less the test window's.
    """
    n_boot, etw = ys.shape
    n_c = kxc.shape[1]
    rw = kxc.shape[0] - etw
    out = np.empty((n_boot, w, n_c))
    ref = np.empty(n_c)
    s = np.empty(n_c)
    for b in range(n_boot):
        y = ys[b]
        ref[:] = col
        s[:] = 0.0
        for i in range(etw):
            row = kxc[y[i]]
            for c in range(n_c):
                ref[c] -= row[c]
                if i < w:
                    s[c] += row[c]
        for c in range(n_c):
            ref[c] /= rw
            out[b, 0, c] = ref[c] - s[c] / w
        for o in range(1, w):
            enter, leave = kxc[y[o + w - 1]], kxc[y[o - 1]]
            for c in range(n_c):
                s[c] += enter[c] - leave[c]
                out[b, o, c] = ref[c] - s[c] / w
    return out


class OnlineDrift:
    """An online MMD or LSDD detector on a reference set (see the module docstring).

    Parameters
    ----------
    kind
        ``"mmd"`` or ``"lsdd"``.
    x_ref
        The reference instances, [n, d] (already standardised by the caller for MMD; LSDD
        standardises on them itself, as alibi-detect's does).
    ert
        Expected run time, in instances, without drift (> 1).
    window
        The sliding test window, in instances (≥ 2).
    n_bootstraps
        Bootstrap samples configuring the thresholds; default ``BOOTSTRAPS_PER_ERT`` × ERT
        (at least 1,000).
    seed
        The permutations' seed (alibi-detect draws them from torch's global generator).
    lambda_rd_max
        LSDD's regularisation: the largest λ whose relative difference stays under this.
    centres
        LSDD's kernel centres, as indices into ``x_ref`` (2·window of them); default drawn
        at random (for reproducing a run of alibi-detect's exactly).

    Raises
    ------
    ValueError
        Too few reference instances for the window (MMD needs more than 2·window − 1; LSDD
        that plus its 2·window kernel centres), a bad ERT or window, non-finite instances.

    """

    def __init__(self, kind: str, x_ref: np.ndarray, ert: float, window: int, *,
                 n_bootstraps: int | None = None, seed: int = 0,
                 lambda_rd_max: float = 0.2, centres: np.ndarray | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"drift detector {kind!r}: choose from {', '.join(KINDS)}")
        x = np.asarray(x_ref, dtype=np.float64)
        if x.ndim != 2 or not np.isfinite(x).all():
            raise ValueError("reference instances must be a finite [n, d] array")
        if not (ert > 1 and math.isfinite(ert)):
            raise ValueError(f"expected run time {ert}: must be a finite number above 1")
        if window < 2:
            raise ValueError(f"window {window}: at least 2 instances")
        self.kind, self.ert, self.window = kind, float(ert), int(window)
        self.fpr = 1.0 / self.ert
        self.n_bootstraps = int(n_bootstraps or max(1000, math.ceil(BOOTSTRAPS_PER_ERT * ert)))
        self.rng = np.random.default_rng(seed)
        etw = 2 * self.window - 1
        need = etw + 2 + (2 * self.window if kind == "lsdd" else 0)  # a sub-reference of 2
        if len(x) < need:
            raise ValueError(f"{len(x)} reference instances: the {kind.upper()} detector with a "
                             f"window of {self.window} needs at least {need}")
        self.t = 0
        if kind == "mmd":
            self._init_mmd(x)
        else:
            self._init_lsdd(x, lambda_rd_max, centres)

    # -- thresholds ----------------------------------------------------------------------------

    def threshold(self, t: int) -> float:
        """The threshold at time step ``t`` (constant from the window's length on)."""
        return self.thresholds[t] if t < self.window else self.thresholds[-1]

    def _chunks(self, per: int) -> list[int]:
        size = max(1, _CHUNK_FLOATS // per)
        return [min(size, self.n_bootstraps - i) for i in range(0, self.n_bootstraps, size)]

    def _tails(self, size: int, n: int, k: int) -> np.ndarray:
        """The last ``k`` of ``size`` random permutations of ``n`` ([size, k]).

        As ``torch.randperm(n)[-k:]`` draws them (a uniformly random ordered sample without
        replacement): the k largest of n uniform keys, ordered by their keys.
        """
        r = self.rng.random((size, n))
        top = np.argpartition(r, n - k, axis=1)[:, n - k:]
        order = np.argsort(np.take_along_axis(r, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    def _sequential(self, stats: np.ndarray, filter_first: bool) -> list[float]:
        """One threshold per offset: the (1 − 1/ERT)-quantile of the samples still alive.

        A sample above an earlier threshold is discarded (``_configure_thresholds``: a
        bootstrap run that has alarmed has stopped).
        """
        alive = np.ones(len(stats), dtype=bool)
        out = []
        for w in range(self.window):
            q = quantile7(stats[alive, w], 1.0 - self.fpr)
            out.append(q)
            if w > 0 or filter_first:
                alive &= stats[:, w] < q
        return out

    # -- MMD -----------------------------------------------------------------------------------

    def _init_mmd(self, x: np.ndarray) -> None:
        self.sigma = median_sigma(x)
        #: The reference instances (MMD: as given; LSDD: standardised on themselves).
        self.x_ref = x
        kxx = gaussian(x, x, self.sigma)
        n, w = len(x), self.window
        etw, rw = 2 * w - 1, len(x) - (2 * w - 1)
        # _configure_thresholds: per bootstrap, a sub-reference (n − etw) and an extended test
        # window of 2w − 1, read as w overlapping windows of w.
        full = float(kxx.sum() - np.trace(kxx))
        col = kxx.sum(0)
        stats = [_mmd_bootstraps(kxx, col, full, self._tails(size, n, etw), np.int64(w))
                 for size in self._chunks(n)]
        self.thresholds = self._sequential(np.concatenate(stats), filter_first=True)
        # _configure_ref_subset: a split whose first window does not alarm.
        self._kxx = kxx
        self._draw_start(n, rw)

    def _draw_start(self, n: int, rw: int) -> None:
        """_configure_ref_subset: a random split whose first window does not alarm."""
        while True:
            perm = self.rng.permutation(n)
            self.start_at(perm[:rw], perm[-self.window:])
            if self.statistic() < self.threshold(0):
                return

    def start_at(self, ref: np.ndarray, test: np.ndarray) -> None:
        """Start the online state from this split instead of the one drawn at construction.

        ``ref``: the indices of the sub-reference, ``test``: of the instances that fill the
        first test window (into the reference set; for LSDD into the instances that are not
        kernel centres, as alibi-detect's ``ref_inds`` and ``init_test_inds``). The time step
        starts again at 0. For reproducing a run of alibi-detect's exactly.
        """
        ref, test = np.asarray(ref, dtype=np.int64), np.asarray(test, dtype=np.int64)
        if len(test) != self.window or len(ref) < 2:
            raise ValueError(f"a split needs {self.window} test instances and at least 2 "
                             "reference ones")
        self.t = 0
        if self.kind == "mmd":
            sub = self._kxx[np.ix_(ref, ref)]
            self._kxx_sub = (sub.sum() - np.trace(sub)) / (len(ref) * (len(ref) - 1))
            self._ref = self.x_ref[ref]
            self._test = self.x_ref[test].copy()
            self._kxy = gaussian(self._ref, self._test, self.sigma)
        else:
            self._c2s = self._kxc[ref].mean(0)
            self._kxtc = self._kxc[test].copy()

    def statistic(self) -> float:
        """The statistic on the current test window."""
        return self._mmd() if self.kind == "mmd" else self._lsdd()

    def _mmd(self) -> float:
        w = self.window
        kyy = gaussian(self._test, self._test, self.sigma)
        return float(self._kxx_sub + (kyy.sum() - np.trace(kyy)) / (w * (w - 1))
                     - 2.0 * self._kxy.mean())

    # -- LSDD ----------------------------------------------------------------------------------

    def _init_lsdd(self, x: np.ndarray, lambda_rd_max: float,
                   centres: np.ndarray | None) -> None:
        # _configure_normalization: z-scored on the reference (torch's std: ddof 1).
        self._mean = x.mean(0)
        self._std = x.std(0, ddof=1) + 1e-12
        x = (x - self._mean) / self._std
        self.x_ref = x
        self.sigma = median_sigma(x)
        n, w = len(x), self.window
        n_centres = 2 * w
        # _configure_kernel_centers
        if centres is None:
            perm = self.rng.permutation(n)
        else:
            chosen = np.asarray(centres, dtype=np.int64)
            perm = np.concatenate([chosen, np.setdiff1d(np.arange(n), chosen)])
            if len(chosen) != n_centres or len(np.unique(chosen)) != n_centres:
                raise ValueError(f"LSDD needs {n_centres} distinct kernel centres")
        centres = x[perm[:n_centres]]
        if len(np.unique(centres, axis=0)) < n_centres:
            centres = centres + self.rng.standard_normal(centres.shape) * 1e-6
        self._centres = centres
        eff = x[perm[n_centres:]]
        kxc = gaussian(eff, centres, self.sigma)
        m = len(eff)
        etw = 2 * w - 1
        rw = m - etw
        h_kernel = gaussian(centres, centres, math.sqrt(2.0) * self.sigma)
        col = kxc.sum(0)
        ys = [self._tails(size, m, etw) for size in self._chunks(max(m, w * n_centres))]
        # Window 0 sets λ (permed_lsdds, Appendix A of Cobb et al.); every window's h is then
        # computed again chunk by chunk rather than kept (B × w × centres floats: 0.9 GB at
        # ERT 14,400 and w 20).
        h0 = np.concatenate([_lsdd_differences(kxc, col, y, np.int64(w))[:, 0] for y in ys])
        self.h_lam_inv = self._regularised(h_kernel, h0, lambda_rd_max)
        stats = []
        for y in ys:
            h = _lsdd_differences(kxc, col, y, np.int64(w))
            flat = h.reshape(-1, h.shape[2])
            stats.append(((flat @ self.h_lam_inv) * flat).sum(1).reshape(len(y), w))
        stats = np.concatenate(stats)
        self.thresholds = self._sequential(stats, filter_first=False)
        # _configure_ref_subset
        self._kxc = kxc
        self._draw_start(m, rw)

    @staticmethod
    def _regularised(h_kernel: np.ndarray, h: np.ndarray, rd_max: float) -> np.ndarray:
        """H_λ⁻¹ for the largest λ in 1, 1/4, … 1/4⁹ whose mean relative difference < rd_max."""
        eye = np.eye(len(h_kernel))
        for lam in (1.0 / 4 ** i for i in range(10)):
            inv = np.linalg.inv(h_kernel + lam * eye)
            omega = h @ inv.T
            h_omega = (h * omega).sum(1)
            o_h_o = ((omega @ h_kernel) * omega).sum(1)
            if np.mean(1.0 - o_h_o / h_omega) < rd_max:
                return 2.0 * inv - inv.T @ h_kernel @ inv
        raise ValueError("LSDD: no regularisation meets the relative difference (too many "
                         "repeated instances); use the MMD detector")

    def _lsdd(self) -> float:
        h = self._c2s - self._kxtc.mean(0)
        return float(h @ self.h_lam_inv @ h)

    # -- the online state ----------------------------------------------------------------------

    def score(self, x_t: np.ndarray) -> float:
        """Take one instance into the test window; the statistic on the new window."""
        x_t = np.asarray(x_t, dtype=np.float64).reshape(1, -1)
        self.t += 1
        if self.kind == "mmd":
            self._test = np.concatenate([self._test[1:], x_t])
            self._kxy = np.concatenate([self._kxy[:, 1:],
                                        gaussian(self._ref, x_t, self.sigma)], axis=1)
            return self._mmd()
        x_t = (x_t - self._mean) / self._std
        self._kxtc = np.concatenate([self._kxtc[1:], gaussian(x_t, self._centres, self.sigma)])
        return self._lsdd()

    def update(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each instance in turn: its statistic and its time step's threshold ([n] each)."""
        xs = np.asarray(xs, dtype=np.float64)
        stat = np.empty(len(xs))
        thr = np.empty(len(xs))
        for i, x in enumerate(xs):
            stat[i] = self.score(x)
            thr[i] = self.threshold(self.t)
        return stat, thr


#: The drift detectors' test window, in instances (one instance a window: 20 cover 1,000
#: transitions at a stride of 50).
DRIFT_WINDOW = 20


@dataclass(frozen=True)
class DriftRun:
    """One detector on one run's post-onset instances.

    ``latency``: the first post-onset instance that alarmed (0: the first; NaN: none);
    ``ratio``: statistic / threshold at each post-onset instance (it alarms above 1);
    ``skipped``: why it did not run ("" when it did).
    """

    latency: float
    ratio: np.ndarray
    skipped: str = ""


def drift_alarms(x: np.ndarray, onset: int, ert: float, *, window: int = DRIFT_WINDOW,
                 kinds: tuple[str, ...] = DRIFT_KINDS, seed: int = 0) -> dict[str, DriftRun]:
    """Each drift detector on a run's instances, its reference those before ``onset``.

    ``x`` [n, d]: the run's instances in order (a loop's (S, A, S'), one a window); each
    column is standardised on the first ``onset`` (columns constant there are dropped: they
    carry no distance), the detectors are configured to ``ert`` instances on those and then
    take the rest one by one. A detector that cannot run on this reference (too few
    instances for its window) is skipped, and says why.
    """
    x = np.asarray(x, dtype=np.float64)
    ref = x[:onset]
    mu, sd = ref.mean(0), ref.std(0, ddof=1) if len(ref) > 1 else np.zeros(x.shape[1])
    keep = np.isfinite(sd) & (sd > 0)
    z = (x[:, keep] - mu[keep]) / sd[keep]
    out = {}
    for kind in kinds:
        try:
            if not keep.any():
                raise ValueError("every column is constant over the reference")
            det = OnlineDrift(kind, z[:onset], ert, window, seed=seed)
        except ValueError as exc:
            out[kind] = DriftRun(math.nan, np.zeros(0), str(exc))
            continue
        stat, thr = det.update(z[onset:])
        ratio = stat / thr
        hits = np.flatnonzero(ratio > 1.0)
        out[kind] = DriftRun(float(hits[0]) if hits.size else math.nan, ratio)
    return out
