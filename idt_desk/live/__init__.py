"""The live loop: a source runs in a worker thread and every window is judged as it completes.

:mod:`~idt_desk.live.source` is the contract a data source implements (settings,
perturbations, modulations, batches of (S, A, S') rows) and :func:`check_source`, its
conformance check; :mod:`~idt_desk.live.plugins` finds sources and commands through entry
points; :mod:`~idt_desk.live.session` runs one source through the pipeline in a thread that
the GUI and the headless ``idt-desk run`` drive by commands and read by snapshots;
:mod:`~idt_desk.live.recorder` gives any Python loop the same (``idt_desk.Recorder``).
"""
