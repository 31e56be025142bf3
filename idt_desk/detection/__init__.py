"""The IDT's P controller (paper §6): is a window an excursion from the coherent baseline.

:mod:`~idt_desk.detection.detectors` holds the calibrated rules (first crossing of k σ,
persistence, CUSUM, EWMA, the multivariate EWMA) and their false-alarm budgets;
:mod:`~idt_desk.detection.matched` compares them across trials at a matched false-alarm
rate; :mod:`~idt_desk.detection.monitor` gathers a baseline of windows and flags each later
window per metric and for the IDT as a whole; :mod:`~idt_desk.detection.auto` switches a
modulation (Hold, input filter) on and off from the alarms (the paper's reflexive
modulation); :mod:`~idt_desk.detection.agency` checks the paper's Table 4 conditions of
agency on a stream; :mod:`~idt_desk.detection.turns` is a dialogue's per-turn 3σ rule.
Metrics in, verdicts out: no threads, no files.
"""
