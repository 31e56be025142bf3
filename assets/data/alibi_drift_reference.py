"""Write ``alibi_drift.npz``: alibi-detect's own online MMD and LSDD on a fixed stream.

The reference ``tests/test_drift.py`` checks ``idt_desk.detection.drift`` against. Run it in a
venv of its own (alibi-detect 0.13 requires numpy<2 and numba<0.60, which this project
cannot run with)::

    python3.11 -m venv /tmp/alibi && /tmp/alibi/bin/pip install "alibi-detect[torch]==0.13.0"
    /tmp/alibi/bin/python assets/data/alibi_drift_reference.py

It saves the reference and test instances, and per detector the kernel bandwidth, the
thresholds its bootstrap configured, the split it drew (and LSDD's kernel centres and
regularised inverse) and the statistic and alarm at every step of the stream: the stream's
last 60 instances are shifted by 0.8 σ in their first two dimensions.
"""

from pathlib import Path

import numpy as np
import torch
from alibi_detect.cd import LSDDDriftOnline, MMDDriftOnline

ERT, WINDOW, BOOTSTRAPS = 50, 10, 5000


def main() -> None:
    """Run both detectors and save what they did."""
    rng = np.random.default_rng(2022)
    x_ref = rng.standard_normal((300, 5))
    stream = rng.standard_normal((200, 5))
    stream[140:, :2] += 0.8
    out = {"x_ref": x_ref, "stream": stream, "ert": ERT, "window": WINDOW,
           "n_bootstraps": BOOTSTRAPS}
    for name, cls in (("mmd", MMDDriftOnline), ("lsdd", LSDDDriftOnline)):
        torch.manual_seed(0)
        det = cls(x_ref, ert=ERT, window_size=WINDOW, backend="pytorch",
                  n_bootstraps=BOOTSTRAPS, verbose=False)
        be = det._detector
        out[f"{name}_sigma"] = be.kernel.sigma.detach().numpy()
        out[f"{name}_thresholds"] = np.array(be.thresholds, dtype=np.float64)
        out[f"{name}_ref_inds"] = be.ref_inds.numpy()
        out[f"{name}_init_test_inds"] = be.init_test_inds.numpy()
        if name == "lsdd":
            out["lsdd_c_inds"] = be.c_inds.numpy()
            out["lsdd_non_c_inds"] = be.non_c_inds.numpy()
            out["lsdd_H_lam_inv"] = be.H_lam_inv.numpy()
        stats, preds = [], []
        for x in stream:
            got = det.predict(x, return_test_stat=True)["data"]
            stats.append(got["test_stat"])
            preds.append(got["is_drift"])
        out[f"{name}_stats"] = np.array(stats, dtype=np.float64)
        out[f"{name}_drift"] = np.array(preds, dtype=np.int64)
    np.savez_compressed(Path(__file__).with_name("alibi_drift.npz"), **out)


if __name__ == "__main__":
    main()
