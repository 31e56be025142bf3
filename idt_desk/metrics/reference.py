"""A plain numpy reference for the metric engine: recount every window with np.unique.

Obviously correct and slow. The tests check the engine against it; ``idt-desk bench engine``
measures the engine's speed against it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["reference_metrics"]


def _entropy(*columns: np.ndarray) -> float:
    joint = np.stack(columns, axis=1)
    _, counts = np.unique(joint, axis=0, return_counts=True)
    p = counts / joint.shape[0]
    return float(-(p * np.log2(p)).sum())


def reference_metrics(
    s: np.ndarray,
    s_next: np.ndarray,
    a: np.ndarray | None = None,
    window: int = 300,
    stride: int = 75,
) -> dict[str, np.ndarray]:
    """Plug-in P, H_f, H_b, dH, MI and entropies per window, recounted from scratch."""
    s, s_next = np.asarray(s), np.asarray(s_next)
    a = np.zeros_like(s) if a is None else np.asarray(a)
    rows = []
    for start in range(0, s.shape[0] - window + 1, stride):
        w = slice(start, start + window)
        h_s, h_a, h_n = _entropy(s[w]), _entropy(a[w]), _entropy(s_next[w])
        h_sa, h_sas = _entropy(s[w], a[w]), _entropy(s[w], a[w], s_next[w])
        mi = h_sa + h_n - h_sas
        denom = h_s + h_a + h_n
        rows.append(
            (start, mi / denom if denom > 0 else np.nan, h_sas - h_sa, h_sas - h_n,
             mi, h_s, h_a, h_n, h_sa, h_sas)
        )
    names = ("start", "P", "H_f", "H_b", "MI", "H_S", "H_A", "H_S_next", "H_SA", "H_SAS")
    table = np.array(rows, dtype=np.float64).reshape(-1, len(names))
    out = {k: table[:, i] for i, k in enumerate(names)}
    out["start"] = out["start"].astype(np.int64)
    out["dH"] = out["H_f"] - out["H_b"]
    return out
