"""The paper's quantities (§3, §8.1): symbols, the metric engine, presets, per-turn token metrics.

A window of W transitions (S, A, S') becomes bi-predictability P = MI(S,A;S') / (H(S) + H(A)
+ H(S')) (a passive system: MI(S;S') / (H(S) + H(S'))), forward and backward predictive
uncertainty H_f = H(S'|S,A), H_b = H(S,A|S') and their asymmetry ΔH = H_f − H_b (paper §3,
§8.1; ``assets/docs/concepts.md``). Continuous states and
actions are first cut into bins per dimension and combined into one symbol
(:mod:`~idt_desk.metrics.symbolize`); :mod:`~idt_desk.metrics.engine` keeps the counts of a
sliding window in compiled loops; :mod:`~idt_desk.metrics.presets` holds the paper's
symbolisations by name; :mod:`~idt_desk.metrics.tokens` computes the same quantities over a
dialogue's tokens, one window per turn, with the length null it is read against.
Nothing here knows about alarms, threads or files.
"""
