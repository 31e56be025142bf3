"""The IDT's P controller (paper §6): is a window an excursion from the coherent baseline.

Each detector is one class registered in :mod:`~idt_desk.detection.registry` (the contract:
name, label, help, the compiled kernel it drives from :mod:`~idt_desk.detection.kernels`, its
state, its fit against the null); :mod:`~idt_desk.detection.kinds` ships the paper's rule
(first crossing of k σ), persistence, CUSUM, EWMA and the multivariate EWMA;
:mod:`~idt_desk.detection.detectors` calibrates them to a false-alarm budget (its spec, the
baseline's autocorrelation and finite size) and :mod:`~idt_desk.detection.nulls` fits their
thresholds against the null;
:mod:`~idt_desk.detection.matched` compares them across trials at a matched false-alarm
rate; :mod:`~idt_desk.detection.monitor` gathers a baseline of windows and flags each later
window per metric and for the IDT as a whole; :mod:`~idt_desk.detection.auto` switches a
modulation (Hold, input filter) on and off from the alarms (the paper's reflexive
modulation); :mod:`~idt_desk.detection.agency` checks the paper's Table 4 conditions of
agency on a stream; :mod:`~idt_desk.detection.turns` is a dialogue's per-turn 3σ rule.
Metrics in, verdicts out: no threads, no files.
"""
