"""Batch work over many runs: the executor, analysis of files and recordings, reports.

:mod:`~idt_desk.experiments.executor` runs a reproduction's independent tasks on local
processes or a Dask cluster and writes the report every reproduction has;
:mod:`~idt_desk.experiments.analyze` computes the windows, the paper's summary tables and
figures of a trajectory file or a dialogue recording (``idt-desk analyze``). The statistics
they report are in :mod:`idt_desk.stats`.
"""
