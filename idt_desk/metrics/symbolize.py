"""Continuous variables to integer symbols (paper §3, §10.2; assets/docs/engine.md).

1. optional: circular variables wrapped to (-pi, pi];
2. z-score each variable with statistics frozen at calibration;
3. equal-width bins spanning each variable's calibrated z-range, edges frozen; later values
   outside the range go to the edge bins (and are counted: :meth:`Symbolizer.symbolize`).
   A circular variable's bins span the whole circle, whatever the calibration data covered,
   so a wrapped angle is never out of range. With ``quantile=True`` the bins hold equal
   shares of the calibration rows instead (edges at the z-scores' quantiles, frozen): a
   loop that sits near a fixed point most of the time, its range set by a transient, gets
   its bins where it sits;
4. the bins of a group of variables become one composite symbol (mixed radix), and the
   symbol is the composite of its groups.

With ``components`` = k the binned columns are not the variables but the top k principal
components of their z-scores (the eigenvectors of their correlation matrix over the
calibration rows, frozen with it): a view of a wide space coarse enough for a window of a
few hundred transitions to resolve (``idt_desk.metrics.views``). Groups then index the
components.

Composites are exact mixed-radix integers while the alphabet fits in int64. Beyond that
(16 bins x 17 variables is 2**68) they are 64-bit hashes of the digits: distinct tuples
collide with probability about n**2 / 2**64 for n distinct tuples (below 1e-7 for a
million), and only the partition of the window matters to the entropies. The engine keys its
joint tables on tuples of these symbols, so (S, A, S') never has to fit in one integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SymbolizationError", "Symbolizer", "combine_digits", "wrap_angle"]

_INT64_MAX = 2**63 - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def wrap_angle(x: np.ndarray) -> np.ndarray:
    """Angles wrapped to (-pi, pi] (-pi itself maps to +pi)."""
    return np.pi - np.mod(np.pi - x, 2 * np.pi)


class SymbolizationError(ValueError):
    """Input that cannot be symbolised (non-finite values, wrong shape, not calibrated)."""


def _mix(x: np.ndarray) -> np.ndarray:
    # Array arithmetic on uint64 wraps modulo 2**64 without warnings.
    x = x ^ (x >> np.uint64(30))
    x = x * _C1
    x = x ^ (x >> np.uint64(27))
    x = x * _C2
    return x ^ (x >> np.uint64(31))


def combine_digits(digits: np.ndarray, radices: Sequence[int]) -> np.ndarray:
    """Composite int64 symbols from per-column digits ``0 <= digits[:, j] < radices[j]``.

    Mixed radix (first column least significant) while prod(radices) fits in int64, else a
    64-bit hash of the digits (non-negative int64).
    """
    digits = np.asarray(digits, dtype=np.int64)
    if digits.ndim != 2 or digits.shape[1] != len(radices):
        raise SymbolizationError(
            f"digits must have shape (n, {len(radices)}), got {digits.shape}"
        )
    if math.prod(int(r) for r in radices) - 1 <= _INT64_MAX:
        out = np.zeros(digits.shape[0], dtype=np.int64)
        place = 1
        for j, r in enumerate(radices):
            out += digits[:, j] * place
            place *= int(r)
        return out
    h = np.full(digits.shape[0], _GOLDEN, dtype=np.uint64)
    for j in range(digits.shape[1]):
        h = _mix(h ^ digits[:, j].astype(np.uint64))
    return (h >> np.uint64(1)).astype(np.int64)


def _principal_axes(z: np.ndarray, k: int) -> np.ndarray:
    """The top ``k`` principal axes of z-scored rows, (n_vars, k), signs fixed.

    Eigenvectors of the correlation matrix by decreasing eigenvalue; each axis's largest
    loading is made positive (an eigenvector's sign is arbitrary; its bins' order is not).
    """
    corr = z.T @ z / max(len(z) - 1, 1)
    values, vectors = np.linalg.eigh(corr)
    axes = vectors[:, np.argsort(values)[::-1][:k]]
    lead = axes[np.argmax(np.abs(axes), axis=0), np.arange(k)]
    return axes * np.where(lead < 0, -1.0, 1.0)


@dataclass
class _Calibration:
    mean: np.ndarray
    std: np.ndarray
    z_lo: np.ndarray
    z_hi: np.ndarray
    #: (n_vars, components): z-scores to the binned components (None: the variables).
    projection: np.ndarray | None = None
    #: Each binned column's inner bin edges in z (quantile bins; None: equal widths).
    edges: list[np.ndarray] | None = None


class Symbolizer:
    """Frozen z-score + equal-width binning + composite symbols.

    Parameters
    ----------
    n_vars
        Number of variables (columns).
    bins
        Bins per variable: one int for all, or one per variable.
    groups
        Variable indices of each group, e.g. ``[[0, 1, 8], [2, 3], ...]``; the composite of
        each group is a digit of the final symbol. None: every variable is its own group.
        Variables in no group are ignored (that is how a variable is dropped from S).
    circular
        Indices of angular variables to wrap to (-pi, pi] before z-scoring.
    names
        Variable names used in error messages (default ``x_0, x_1, ...``).
    components
        Bin the top this-many principal components of the variables' z-scores instead of
        the variables (None: the variables). ``bins`` and ``groups`` are then per component.
    quantile
        Cut each column's bins at the calibration rows' quantiles (equal shares of the rows)
        instead of at equal widths of its range. The range still says what is out of range.

    """

    def __init__(
        self,
        n_vars: int,
        bins: int | Sequence[int] = 16,
        groups: Sequence[Sequence[int]] | None = None,
        circular: Sequence[int] = (),
        names: Sequence[str] | None = None,
        components: int | None = None,
        quantile: bool = False,
    ) -> None:
        if n_vars < 1:
            raise ValueError(f"n_vars must be >= 1, got {n_vars}")
        self.n_vars = int(n_vars)
        if components is not None and not 1 <= int(components) <= self.n_vars:
            raise ValueError(f"components must be from 1 to {self.n_vars} (the variables), "
                             f"got {components!r}")
        #: Principal components binned (None: the variables themselves).
        self.components = None if components is None else int(components)
        #: Columns binned: the variables, or the components.
        self.n_cols = self.n_vars if components is None else self.components
        #: Bins at the calibration's quantiles (True) or of equal width over its range.
        self.quantile = bool(quantile)
        b = np.broadcast_to(np.asarray(bins, dtype=np.int64), (self.n_cols,)).copy()
        if np.any(b < 1):
            raise ValueError(f"bins must be >= 1, got {bins!r}")
        self.bins = b
        if groups is None:
            groups = [[j] for j in range(self.n_cols)]
        self.groups = [tuple(int(j) for j in g) for g in groups]
        flat = [j for g in self.groups for j in g]
        if not flat or any(g == () for g in self.groups):
            raise ValueError("every group needs at least one variable")
        if min(flat) < 0 or max(flat) >= self.n_cols or len(set(flat)) != len(flat):
            raise ValueError(
                f"groups must use distinct variable indices in [0, {self.n_cols}), got {groups!r}"
            )
        self.circular = tuple(int(j) for j in circular)
        if any(j < 0 or j >= self.n_vars for j in self.circular):
            raise ValueError(f"circular indices out of range: {circular!r}")
        self.names = list(names) if names is not None else [f"x_{j}" for j in range(n_vars)]
        if len(self.names) != self.n_vars:
            raise ValueError(f"{len(self.names)} names for {self.n_vars} variables")
        self._cal: _Calibration | None = None
        # While the whole alphabet fits in int64 the composite of the group composites is one
        # mixed-radix number over the variables: one weighted sum per row (a live session
        # symbolises a chunk in three calls, so per-call cost matters).
        self._place: np.ndarray | None = None
        if self.alphabet_size - 1 <= _INT64_MAX:
            place = np.zeros(self.n_cols, dtype=np.int64)
            outer = 1
            for g in self.groups:
                inner = 1
                for j in g:
                    place[j] = inner * outer
                    inner *= int(self.bins[j])
                outer *= inner
            self._place = place

    # -- calibration ------------------------------------------------------------------------

    @property
    def calibrated(self) -> bool:
        """Whether :meth:`fit` has frozen the statistics."""
        return self._cal is not None

    def fit(
        self, x: np.ndarray, ranges: Mapping[int, tuple[float, float]] | None = None,
        margin: float = 0.0,
    ) -> Symbolizer:
        """Freeze mean, standard deviation and z-range of each variable from ``x`` (n, d).

        ``ranges`` gives known (low, high) bounds of some variables (by index, in their own
        units); their bins span those bounds, together with the data, instead of the data's
        range alone. A circular variable's bins always span the whole circle. ``margin``
        widens every other variable's range by that fraction of its span on each side: with
        2 bins the edge stays the range's midpoint (the same symbols), and a value counts as
        out of range only once it is that far beyond anything calibrated.

        With ``components`` the projection is fitted here too, and ``ranges`` and the circle
        do not apply (a component's range is the data's). With ``quantile`` the edges are the
        rows' quantiles; ``ranges``, ``margin`` and the circle then set only the range.
        """
        x = self._prepare(x)
        if x.shape[0] < 1:
            raise SymbolizationError("cannot calibrate on zero rows")
        mean = x.mean(axis=0)
        std = x.std(axis=0, ddof=1) if x.shape[0] > 1 else np.zeros(self.n_vars)
        std = np.where(std > 0, std, 1.0)  # a constant variable keeps z = 0
        z = (x - mean) / std
        projection = None if self.components is None else _principal_axes(
            z, self.components)
        if projection is not None:
            z = z @ projection
        z_lo, z_hi = z.min(axis=0), z.max(axis=0)
        edges = None if not self.quantile else [
            np.quantile(z[:, j], np.arange(1, int(b)) / int(b)) for j, b in enumerate(self.bins)]
        if margin:
            span = z_hi - z_lo
            z_lo, z_hi = z_lo - margin * span, z_hi + margin * span
        known = {} if projection is not None else {j: (-np.pi, np.pi) for j in self.circular}
        if projection is None:
            known.update({int(j): r for j, r in (ranges or {}).items() if j not in known})
        for j, (lo, hi) in known.items():
            z_lo[j] = min((lo - mean[j]) / std[j], z_lo[j])
            z_hi[j] = max((hi - mean[j]) / std[j], z_hi[j])
        self._cal = _Calibration(mean, std, z_lo, z_hi, projection, edges)
        return self

    def _z(self, x: np.ndarray) -> np.ndarray:
        """The binned columns of prepared rows: z-scores, projected when there is a view."""
        cal = self._cal
        z = (x - cal.mean) / cal.std
        return z if cal.projection is None else z @ cal.projection

    def widened(self, *xs: np.ndarray) -> Symbolizer:
        """A copy whose bins also cover every value of ``xs`` (each (n, d)).

        Mean and standard deviation stay frozen; each variable's z-range grows to include the
        new values, and its equal-width bins are re-cut over the wider range (quantile bins
        keep their edges: the edge bins grow). Nothing of ``xs`` is then out of range. (Used
        to re-check a change seen while values were being clamped into edge bins: is it
        still there when the bins cover the data?)
        """
        if self._cal is None:
            raise SymbolizationError("the symboliser is not calibrated: call fit() first")
        cal = self._cal
        z_lo, z_hi = cal.z_lo.copy(), cal.z_hi.copy()
        for x in xs:
            x = self._prepare(x)
            if len(x):
                z = self._z(x)
                z_lo, z_hi = np.minimum(z_lo, z.min(axis=0)), np.maximum(z_hi, z.max(axis=0))
        out = Symbolizer.from_dict({**self.to_dict(), "calibration": None})
        out._cal = _Calibration(cal.mean, cal.std, z_lo, z_hi, cal.projection, cal.edges)
        return out

    def fit_transform(self, x: np.ndarray) -> np.ndarray:
        """Calibrate on ``x`` and symbolise it."""
        return self.fit(x).transform(x)

    # -- symbols ----------------------------------------------------------------------------

    def digits(self, x: np.ndarray) -> np.ndarray:
        """Bin index of every value, shape (n, d), using the frozen calibration."""
        return self._digits(x)[0]

    def _digits(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bin indices (n, d) and, per row, whether a used value left the calibrated range."""
        if self._cal is None:
            raise SymbolizationError("the symboliser is not calibrated: call fit() first")
        x = self._prepare(x)
        cal = self._cal
        z = self._z(x)
        if cal.edges is not None:  # a value on an edge goes above it, as with equal widths
            idx = np.stack([np.searchsorted(e, z[:, j], side="right")
                            for j, e in enumerate(cal.edges)], axis=1)
        else:
            span = cal.z_hi - cal.z_lo
            width = np.where(span > 0, span, 1.0) / self.bins
            idx = np.floor((z - cal.z_lo) / width)
            # A zero-width range: the calibrated value and below -> bin 0, above -> last bin.
            idx = np.where(span > 0, idx, np.where(z > cal.z_hi, self.bins - 1, 0))
        used = [j for g in self.groups for j in g]
        zu = z[:, used]
        outside = ((zu < cal.z_lo[used]) | (zu > cal.z_hi[used])).any(axis=1)
        return np.clip(idx, 0, self.bins - 1).astype(np.int64), outside

    def positions(self, x: np.ndarray) -> np.ndarray:
        """Where each value of the binned columns lies, in bins, shape (n, columns).

        2.5 is the middle of bin 2; a value below the calibrated range is negative. Equal
        widths: the z-score's distance from the range's low end in bin widths; quantile bins:
        interpolated between the frozen edges (the edge bins' widths beyond them). A window
        whose values all stay within one bin width in every column has moved less than the
        bins can see (:func:`idt_desk.metrics.regime.regime`'s ``still``).
        """
        if self._cal is None:
            raise SymbolizationError("the symboliser is not calibrated: call fit() first")
        cal = self._cal
        z = self._z(self._prepare(x))
        if cal.edges is None:
            span = cal.z_hi - cal.z_lo
            return np.where(span > 0, (z - cal.z_lo) / np.where(span > 0, span, 1.0), 0.0) \
                * self.bins
        out = np.empty_like(z)
        for j, e in enumerate(cal.edges):
            xp = np.array([cal.z_lo[j], *e, cal.z_hi[j]])
            pos = np.interp(z[:, j], xp, np.arange(len(xp), dtype=np.float64))
            # Beyond the range, the edge bins' widths go on (as equal widths do).
            first, last = max(xp[1] - xp[0], 1e-12), max(xp[-1] - xp[-2], 1e-12)
            pos = np.where(z[:, j] < xp[0], (z[:, j] - xp[0]) / first, pos)
            out[:, j] = np.where(z[:, j] > xp[-1], len(xp) - 1 + (z[:, j] - xp[-1]) / last,
                                 pos)
        return out

    def group_symbols(self, x: np.ndarray) -> np.ndarray:
        """Composite symbol of each group, shape (n, n_groups)."""
        return self._group_symbols(self._digits(x)[0])

    def _group_symbols(self, d: np.ndarray) -> np.ndarray:
        return np.stack(
            [combine_digits(d[:, list(g)], [int(self.bins[j]) for j in g]) for g in self.groups],
            axis=1,
        )

    def symbolize_groups(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each group's composite symbol (n, n_groups), and the rows out of range.

        Per row, whether a value left the calibrated range (as :meth:`symbolize`): the
        symbols of a preset whose groups are IDTs of their own (``Preset.parts``).
        """
        d, outside = self._digits(x)
        return self._group_symbols(d), outside

    def group_radices(self) -> list[int]:
        """Alphabet size of each group's composite symbol."""
        return [math.prod(int(self.bins[j]) for j in g) for g in self.groups]

    def transform(self, x: np.ndarray) -> np.ndarray:
        """One int64 symbol per row: the composite of the group symbols."""
        return self.symbolize(x)[0]

    def symbolize(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Symbols as :meth:`transform`, and per row whether a value left the calibrated range.

        Such a value was clamped into an edge bin: that is how a live session's frozen symbols
        meet data the calibration never saw. The fraction of such rows per window tells a
        user when a change in the metrics is an artefact of the symbols rather than a change
        of coupling.
        """
        d, outside = self._digits(x)
        if self._place is not None:
            return d @ self._place, outside
        return combine_digits(self._group_symbols(d), self.group_radices()), outside

    @property
    def alphabet_size(self) -> int:
        """Number of possible symbols (may exceed 2**63; symbols are then hashed)."""
        return math.prod(self.group_radices())

    # -- persistence ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description, including the frozen calibration if any."""
        d: dict[str, Any] = {
            "n_vars": self.n_vars,
            "bins": self.bins.tolist(),
            "groups": [list(g) for g in self.groups],
            "circular": list(self.circular),
            "names": self.names,
        }
        if self.components is not None:
            d["components"] = self.components
        if self.quantile:
            d["quantile"] = True
        if self._cal is not None:
            d["calibration"] = {
                k: getattr(self._cal, k).tolist() for k in ("mean", "std", "z_lo", "z_hi")
            }
            if self._cal.projection is not None:
                d["calibration"]["projection"] = self._cal.projection.tolist()
            if self._cal.edges is not None:
                d["calibration"]["edges"] = [e.tolist() for e in self._cal.edges]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Symbolizer:
        """Rebuild a symboliser written by :meth:`to_dict`."""
        sym = cls(d["n_vars"], d["bins"], d["groups"], d.get("circular", ()), d.get("names"),
                  d.get("components"), bool(d.get("quantile", False)))
        cal = d.get("calibration")
        if cal is not None:
            projection, edges = cal.get("projection"), cal.get("edges")
            if sym.quantile and (edges is None or len(edges) != sym.n_cols):
                raise ValueError("a quantile symboliser's calibration needs the inner edges "
                                 f"of each of its {sym.n_cols} columns")
            sym._cal = _Calibration(*(np.asarray(cal[k], dtype=np.float64)
                                      for k in ("mean", "std", "z_lo", "z_hi")),
                                    None if projection is None
                                    else np.asarray(projection, dtype=np.float64),
                                    None if edges is None
                                    else [np.asarray(e, dtype=np.float64) for e in edges])
        return sym

    # -- helpers ----------------------------------------------------------------------------

    def _prepare(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1 and self.n_vars == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != self.n_vars:
            raise SymbolizationError(
                f"expected an array of shape (n, {self.n_vars}), got {x.shape}"
            )
        bad = ~np.isfinite(x)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise SymbolizationError(
                f"non-finite value {x[row, col]} in variable '{self.names[col]}' at row {row}"
            )
        if self.circular:
            x = x.copy()
            c = list(self.circular)
            x[:, c] = wrap_angle(x[:, c])
        return x
