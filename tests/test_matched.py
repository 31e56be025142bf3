"""The one matched false-alarm comparison the reproductions share, against a brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from idt_desk.detection.matched import MATCHED_RATE, matched_comparison, records

# Whole numbers: ties are common (the threshold falls on one) and rounding plays no part.
series = st.lists(st.integers(-5, 50).map(float), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.lists(series, min_size=1, max_size=30), st.lists(series, max_size=12))
def test_the_comparison_is_the_brute_force_one(controls, perturbed):
    got = matched_comparison([records(np.array(c)) for c in controls],
                             [records(np.array(p)) for p in perturbed])
    # Brute force from the raw statistics.
    peak = sorted((max(c) for c in controls), reverse=True)
    allowed = int(MATCHED_RATE * len(controls) + 1e-9)
    theta = peak[allowed] if allowed < len(peak) else -np.inf
    assert got["threshold_sigma"] == theta and got["allowed_false_alarms"] == allowed
    assert got["false_alarms"] == {"alarms": sum(v > theta for v in peak),
                                   "trials": len(controls)}
    hit = [p for p in perturbed if max(p) > theta]
    assert got["detection"]["detected"] == len(hit)
    lat = [next(j for j, v in enumerate(p) if v > theta) for p in hit]
    assert got["median_latency"] == (float(np.median(lat)) if lat else None)
    # At most the allowed share of the controls alarms at the matched threshold.
    assert got["false_alarms"]["alarms"] <= allowed
